"""The process setup of the reference on a CPU: which malloc it runs on.

PyTorch on a CPU allocates and frees every intermediate tensor through the C
allocator. glibc's defaults hand any block of 128 KiB or more back to the
system (mmap/munmap, or a trim of the heap top) as soon as it is freed, so
every large tensor of every step costs fresh page faults. An experienced user
keeps the memory instead: an allocator that caches (tcmalloc, jemalloc) or
glibc told not to return it. This has to be in place before Python starts,
so `apply()` re-executes the interpreter once with the chosen environment.
It must run before `import torch` (train.py and bench_env.py call it first).

What it deliberately is not: a general process launcher. It sets the
allocator and nothing else (threads come from --threads, precision from
--precision); README.md has the measurements behind the default.

  --allocator auto          the default: tcmalloc if installed, else glibc-tuned
  --allocator tcmalloc      LD_PRELOAD of libtcmalloc_minimal.so.4 (libtcmalloc-minimal4)
  --allocator jemalloc      LD_PRELOAD of libjemalloc.so.2 (libjemalloc2)
  --allocator glibc-tuned   glibc kept from returning memory (MALLOC_*_ variables below)
  --allocator system        nothing added or taken away: glibc at its defaults unless
                            the caller's environment sets MALLOC_* or LD_PRELOAD
                            (the JSON summary shows what was in effect)
"""
import ctypes.util
import os
import sys

CHOICES = ("auto", "tcmalloc", "jemalloc", "glibc-tuned", "system")

# glibc-tuned: never serve a block by mmap (so freeing never munmaps), never
# trim the heap's top, and grow the heap 256 MiB at a time.
GLIBC_TUNED = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "MALLOC_TOP_PAD_": str(256 << 20),
}
PRELOAD = {"tcmalloc": "tcmalloc_minimal", "jemalloc": "jemalloc"}
PACKAGE = {"tcmalloc": "libtcmalloc-minimal4", "jemalloc": "libjemalloc2"}
# the environment of the allocator the process runs on; read back by report()
ENV_KEYS = ("LD_PRELOAD",) + tuple(GLIBC_TUNED) + ("MALLOC_CONF",)
MARK = "MOONRL_REF_ALLOCATOR"


def requested(argv):
    """The --allocator value in argv (argparse checks it again later)."""
    for i, a in enumerate(argv):
        if a == "--allocator" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--allocator="):
            return a.split("=", 1)[1]
    return "auto"


def resolve(name):
    """(allocator, soname or None, note) for a requested name; auto picks the best available."""
    if name not in CHOICES:
        raise SystemExit("--allocator %s: accepted %s" % (name, ", ".join(CHOICES)))
    if name == "auto":
        so = ctypes.util.find_library(PRELOAD["tcmalloc"])
        if so:
            return "tcmalloc", so, ""
        return "glibc-tuned", None, ("tcmalloc is not installed (apt-get install %s): using glibc-tuned"
                                     % PACKAGE["tcmalloc"])
    if name in PRELOAD:
        so = ctypes.util.find_library(PRELOAD[name])
        if not so:
            raise SystemExit("--allocator %s: lib%s.so is not installed; apt-get install %s "
                             "(make bench-deps does), or choose glibc-tuned or system"
                             % (name, PRELOAD[name], PACKAGE[name]))
        return name, so, ""
    return name, None, ""


def environment(name, so, base):
    """The environment the reference runs in for allocator `name` (base: the caller's)."""
    env = dict(base)
    if name == "system":
        env[MARK] = name
        return env
    env = {k: v for k, v in env.items() if k not in GLIBC_TUNED and k != "MALLOC_CONF"}
    pre = [p for p in env.pop("LD_PRELOAD", "").split() if p and "malloc" not in os.path.basename(p)]
    if name in PRELOAD:
        pre.insert(0, so)
    elif name == "glibc-tuned":
        env.update(GLIBC_TUNED)
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
    env[MARK] = name
    return env


def in_place(name):
    """Whether this process already runs on allocator `name`."""
    lib = loaded_malloc()
    if name in PRELOAD:
        return bool(lib and lib.startswith("lib" + PRELOAD[name] + ".so"))
    if name == "system":
        return True
    return lib is None and all(os.environ.get(k) == v for k, v in GLIBC_TUNED.items())


def apply(argv=None):
    """Re-executes this interpreter once with the allocator's environment, unless it is in place.

    Returns the allocator's name. The marker variable makes it at most one re-exec: a setting
    that did not take (a preload the loader refused) is an error, not a loop.
    """
    argv = sys.argv[1:] if argv is None else argv
    name, so, note = resolve(requested(argv))
    if name == "system" and not os.environ.get(MARK):
        os.environ[MARK] = name  # nothing to change: no re-exec
        return name
    if os.environ.get(MARK) == name:
        if not in_place(name):
            raise SystemExit("reference: --allocator %s did not take effect (LD_PRELOAD=%r, malloc mapped: %s)"
                             % (name, os.environ.get("LD_PRELOAD", ""), loaded_malloc()))
        return name
    if note:
        sys.stderr.write("reference: %s\n" % note)
    env = environment(name, so, os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, sys.argv[0]] + list(argv), env)


def loaded_malloc():
    """The file name of the malloc library preloaded into this process, or None (glibc's own)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                base = line.rsplit("/", 1)[-1].strip()
                if base.startswith(("libjemalloc", "libtcmalloc")):
                    return base
    except OSError:
        pass
    return None


def report():
    """What the JSON summary says about the allocator: the choice, its variables, the mapped library."""
    return {
        "name": os.environ.get(MARK, "system"),
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "loaded": loaded_malloc(),
    }


def big_block_source(size=64 << 20):
    """Where a `size`-byte malloc lands: "[heap]" (brk: glibc told not to mmap), "mmap" otherwise."""
    import ctypes
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    p = libc.malloc(size)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= p < hi:
                    return "[heap]" if line.rstrip().endswith("[heap]") else "mmap"
    finally:
        libc.free(p)
    return "unmapped"


if __name__ == "__main__":
    # A probe: `python3 launch.py --allocator X` prints the state the reference would run in.
    import json
    apply()
    print(json.dumps(dict(report(), big_block=big_block_source())))
