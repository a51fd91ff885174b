# moonrl - thin wrapper over CMake. Every dependency is named here, once.
#   make run    install what is missing, build, train the built-in default
#   make test   install what is missing (also the test packages), build, run every test (ctest + busted)
#   make bench  install what is missing (also PyTorch: PyPI's, pinned in requirements-bench.txt, into
#               build/venv-bench), build, benchmark side by side
#               (env and small-network rows, a few minutes on 2 cores)
#   make bench-full  the same with the reference-network row (192 x 128): add ~12 minutes on a quiet 2-core machine
#   make install     after `make`: install $(PREFIX)/bin/moonrl (self-contained: Lua and configs are
#               embedded) and the examples and docs under $(PREFIX)/share/moonrl;
#               PREFIX=/usr/local by default, DESTDIR for staged installs

# libopenmpi-dev, openmpi-bin: data-parallel runs across processes (docs/data-parallel.md)
APT_PACKAGES   := build-essential cmake pkg-config luajit libluajit-5.1-dev libuv1-dev \
                  lua-luv-dev lua-busted libhttp-parser-dev libjs-dygraphs libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin
# the reference's malloc (bench/reference/launch.py): tcmalloc by default; jemalloc and the full
# tcmalloc for bench/reference/measure_allocators.py, which compares them. python3-venv and
# python3-dev: build/venv-bench, and the headers torch.compile's C++ kernels build against.
BENCH_PACKAGES := python3-venv python3-dev gnuplot-nox \
                  libtcmalloc-minimal4 libjemalloc2 libgoogle-perftools4
# the peer where PyPI cannot be reached: Debian's PyTorch (1.13, no torch.compile)
BENCH_FALLBACK := python3-torch python3-numpy
# spec/slurm_spec.lua runs a single-node Slurm cluster of its own: munged,
# slurmctld and slurmd started by the spec with its own key, socket, ports and
# slurm.conf. Installing does not get in its way: without systemd, postinst's
# invoke-rc.d may start munge on /run/munge (a container's policy-rc.d stops
# even that), and Debian's slurmctld/slurmd scripts start nothing without
# /etc/slurm/slurm.conf.
TEST_PACKAGES  := slurm-wlm munge python3-venv chromium chromium-driver

BUILD ?= build
PREFIX ?= /usr/local
DESTDIR ?=
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# the test suite's Python packages (requirements.txt, pinned), by pip, here only
PY_VENV := $(BUILD)/venv
# the benchmark peer, PyTorch from PyPI (requirements-bench.txt, pinned), by pip, here only: make bench
# installs it, make test never does (its specs use it where it is there and are pending where not)
BENCH_VENV := $(BUILD)/venv-bench

.PHONY: all deps bench-deps bench-fallback test-deps build run test bench bench-full gpu-carry install uninstall clean

all: build

# Installs only what is missing; apt-get needs root (or sudo).
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "moonrl: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call apt_install,$(APT_PACKAGES))

# The venv is (re)filled only when requirements-bench.txt differs from the copy the last
# successful install left in it. Without PyPI: Debian's torch 1.13, said so.
bench-deps: deps
	$(call apt_install,$(BENCH_PACKAGES))
	@if cmp -s requirements-bench.txt $(BENCH_VENV)/requirements-bench.txt 2>/dev/null; then :; \
	elif { [ -x $(BENCH_VENV)/bin/pip ] || env -u PYTHONPATH python3 -m venv $(BENCH_VENV); } && \
	  echo "moonrl: installing requirements-bench.txt (PyTorch from PyPI, about 5 GiB) into $(BENCH_VENV)" && \
	  env -u PYTHONPATH $(BENCH_VENV)/bin/pip install -q --disable-pip-version-check --retries 2 --timeout 30 \
	    -r requirements-bench.txt; then \
	  cp requirements-bench.txt $(BENCH_VENV)/requirements-bench.txt; \
	else \
	  echo "moonrl: could not install requirements-bench.txt into $(BENCH_VENV) (PyPI unreachable?):" \
	    "falling back to Debian's python3-torch (torch 1.13, no torch.compile column)"; \
	  $(MAKE) --no-print-directory bench-fallback; \
	fi

bench-fallback:
	$(call apt_install,$(BENCH_FALLBACK))

test-deps: deps
	$(call apt_install,$(TEST_PACKAGES))
	@[ -x $(PY_VENV)/bin/pip ] || env -u PYTHONPATH python3 -m venv $(PY_VENV) || \
	  echo "moonrl: could not create the virtual environment $(PY_VENV): the specs that need requirements.txt are skipped"
	@[ ! -x $(PY_VENV)/bin/pip ] || env -u PYTHONPATH $(PY_VENV)/bin/pip install -q --disable-pip-version-check \
	  -r requirements.txt || \
	  echo "moonrl: could not install requirements.txt into $(PY_VENV) (no network?): the specs that need it are skipped"

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/moonrl train

# The specs' runs search conv algorithms into a cache of their own (not the user's ~/.cache/moonrl).
test: test-deps build
	cd $(BUILD) && ctest --output-on-failure
	d=$$(mktemp -d /tmp/moonrl-test-cache-XXXXXX) && MOONRL_CACHE_DIR=$$d busted --lua=luajit spec; \
	  rc=$$?; rm -rf "$$d"; exit $$rc

bench: bench-deps build
	./$(BUILD)/moonrl bench --compare

bench-full: bench-deps build
	./$(BUILD)/moonrl bench --compare --rows env,small,ref --reps 3

# What a lent GPU machine needs beside the working tree (bench/gpu_session.sh):
# the binaries and the shared libraries it lacks (OpenBLAS, oneDNN, Open MPI and their runtimes:
# moonrl links libmpi, whose plugins it loads only when started by mpirun or srun),
# packed into $(GPU_CARRY).tar.xz (carry that; bench/gpu_session.sh unpacks it).
GPU_CARRY := .carry/gpu
gpu-carry: build
	@mkdir -p $(GPU_CARRY)
	@for b in $(BUILD)/moonrl $(BUILD)/test_devmem $(BUILD)/test_cuda_* $(BUILD)/test_bitcompat $(BUILD)/test_trainer*; do \
	  [ -x $$b ] && strip --strip-unneeded -o $(GPU_CARRY)/$$(basename $$b) $$b; done; true
	@for l in $$(ldd $(BUILD)/moonrl | awk '/openblas|gfortran|quadmath|gomp|dnnl|OpenCL|stdc++|libmpi|open-rte|open-pal|hwloc|libevent|libudev|libz\./ {print $$3}'); do \
	  strip --strip-unneeded -o $(GPU_CARRY)/$$(basename $$l) $$l 2>/dev/null || cp -L $$l $(GPU_CARRY)/; done
	@# the device tool carries 64 MiB at most: the folder is ~100 MiB, xz makes it ~16
	@tar cJf $(GPU_CARRY).tar.xz -C $(GPU_CARRY) .
	@du -sh $(GPU_CARRY) $(GPU_CARRY).tar.xz

# The binary needs nothing beside it (the Lua library and configs/ are embedded,
# LuaJIT and libuv are shared libraries of the system); examples and docs are
# for reading. It builds nothing (`sudo make install` leaves no root-owned
# files in the tree): run `make` first.
install:
	@[ -x $(BUILD)/moonrl ] || { echo "moonrl: no $(BUILD)/moonrl to install: run make first (then make install)" >&2; exit 1; }
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/share/moonrl/examples" "$(DESTDIR)$(PREFIX)/share/moonrl/docs"
	install -m 755 $(BUILD)/moonrl "$(DESTDIR)$(PREFIX)/bin/moonrl"
	install -m 644 examples/*.lua examples/*.c "$(DESTDIR)$(PREFIX)/share/moonrl/examples/"
	install -m 644 README.md "$(DESTDIR)$(PREFIX)/share/moonrl/"
	install -m 644 docs/*.md "$(DESTDIR)$(PREFIX)/share/moonrl/docs/"
	@echo "moonrl: installed $(DESTDIR)$(PREFIX)/bin/moonrl (examples and docs in $(DESTDIR)$(PREFIX)/share/moonrl)"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/moonrl"
	rm -rf "$(DESTDIR)$(PREFIX)/share/moonrl"

clean:
	rm -rf $(BUILD)
