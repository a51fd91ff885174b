#!/usr/bin/env bash
# bench/gpu_session.sh - everything a session with a lent GPU checks and
# measures, in as few calls of the device tool as possible.
#
# Here (the CPU machine):   make gpu-carry      (builds; packs .carry/gpu.tar.xz, git-ignored)
# There (the device tool):  run with carry [".carry/gpu.tar.xz"] and the command
#                           bash bench/gpu_session.sh tests      (about 2 min; SAN_RUNS, TEST_LIMIT, ONLY)
#                           bash bench/gpu_session.sh bench      (about 8 min at most)
#                           bash bench/gpu_session.sh learn      (about 5 min)
#                           bash bench/gpu_session.sh smoke      (one short row of each, 1 min)
#                           bash bench/gpu_session.sh table      (ENV_SPEC's table, TABLE_UPDATES per mode)
#                           bash bench/gpu_session.sh compare    (bench's ref row and --compare alone)
#                           bash bench/gpu_session.sh ab         (issue 50's written-ahead paths, each A/B
#                                                                 against the old one, alternated; ~3.5 min)
#                           bash bench/gpu_session.sh window     (tests, ab, compare: one window's call,
#                                                                 ~6 min on an H100, 8 at most)
#                           (several at once: bash bench/gpu_session.sh tests smoke)
# Here, without a GPU:      DRY_RUN=1 bash bench/gpu_session.sh window
#                           (the build's binaries instead of the carry; every step runs as it would
#                           there: the tests' CPU halves, "skipped: no GPU", the benches' refusals;
#                           its own time is in docs/cuda.md)
#
# The GPU machine has the driver, CUDA 13 and PyTorch (cuBLAS 13 inside its
# site-packages) but no OpenBLAS, LuaJIT or libuv: moonrl links LuaJIT, libuv
# and luv statically and the CUDA runtime statically; OpenBLAS and its
# Fortran runtime travel in .carry/gpu; cuBLAS is found below.
#
# Everything goes to $OUT/session.log (one file: the tool brings back at most
# eight) and the benchmark rows to $OUT/bench.jsonl; the scaling table to
# $OUT/scaling_gpu_ref.csv. Each step has its own time limit, so one that
# hangs costs its limit, not the call.
set -u
cd "$(dirname "$0")/.."
HERE=$PWD
CARRY=$HERE/.carry/gpu
OUT=${OUT:-$HERE/gpu-out}
export OUT
mkdir -p "$OUT"
LOG=$OUT/session.log
JSON=$OUT/bench.jsonl
what="${*:-tests}"

if [ "${DRY_RUN:-0}" = 1 ]; then   # here: the build's own binaries, whatever .carry holds
    CARRY=$HERE/build
    [ -x "$CARRY/moonrl" ] || { echo "DRY_RUN=1: no $CARRY/moonrl (make build)"; exit 2; }
    export MOONRL_LUA_PATH=$HERE
    echo "DRY_RUN=1: the binaries of $CARRY, on this machine$(command -v nvidia-smi >/dev/null || echo ' (no GPU: nvidia-smi is missing; the GPU halves will say skipped)')"
else
    [ -x "$CARRY/moonrl" ] || [ ! -f "$CARRY.tar.xz" ] || { mkdir -p "$CARRY" && tar xJf "$CARRY.tar.xz" -C "$CARRY"; }
    [ -x "$CARRY/moonrl" ] || { echo "no $CARRY/moonrl: run 'make gpu-carry' on the build machine and carry .carry/gpu"; exit 2; }
    nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU here (nvidia-smi -L failed): nothing run; DRY_RUN=1 runs the steps anyway"; exit 3; }
fi
PY=$(command -v python3)
CUBLAS_DIR=$("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "cu*", "lib", "libcublas.so.13")) + glob.glob(os.path.join(d, "nvidia", "cublas", "lib", "libcublas.so.13")):
        print(os.path.dirname(f)); raise SystemExit
EOF
)
[ -n "$CUBLAS_DIR" ] || [ "${DRY_RUN:-0}" = 1 ] || CUBLAS_DIR=$(dirname "$(find / -name 'libcublas.so.13' -print -quit 2>/dev/null)" 2>/dev/null)
# cuDNN 9 for cuda.conv = cudnn / auto (kernels/conv_cudnn.cu loads it at run time): PyTorch's wheel
CUDNN_DIR=$("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "cudnn", "lib", "libcudnn.so.9")) + glob.glob(os.path.join(d, "nvidia", "cu*", "lib", "libcudnn.so.9")):
        print(os.path.dirname(f)); raise SystemExit
EOF
)
[ -n "$CUDNN_DIR" ] || [ "${DRY_RUN:-0}" = 1 ] || CUDNN_DIR=$(dirname "$(find / -name 'libcudnn.so.9' -print -quit 2>/dev/null)" 2>/dev/null)
export LD_LIBRARY_PATH=$CARRY:${CUBLAS_DIR:-/usr/local/cuda/lib64}${CUDNN_DIR:+:$CUDNN_DIR}:${LD_LIBRARY_PATH:-}
# the conv algorithm caches (cuda.conv = auto) in the output, so the window's search comes back with the log
export MOONRL_CACHE_DIR=${MOONRL_CACHE_DIR:-$OUT/cache}
export MOONRL_HOME=$HERE OMP_NUM_THREADS=${OMP_NUM_THREADS:-16} PYTHONUNBUFFERED=1
MR=$CARRY/moonrl

step() {   # step NAME SECONDS COMMAND...: runs it, logs it, prints its tail and exit code
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/.step" 2>&1
    local rc=$?
    cat "$OUT/.step" >>"$LOG"
    tail -n "${TAIL:-6}" "$OUT/.step"
    echo "=== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$LOG"
    grep -h '^{' "$OUT/.step" >>"$JSON" 2>/dev/null
    rm -f "$OUT/.step"
    return 0
}

{
    echo "# gpu_session $what, $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    echo "cuBLAS from: ${CUBLAS_DIR:-not found}; cuDNN from: ${CUDNN_DIR:-not found}"
} | tee -a "$LOG"

for w in $what; do
case $w in
smoke)
    # one short row of each kind: does the binary run on this GPU at all
    step "env 65536 (smoke)" 60 "$MR" bench env --device cuda --envs 65536 --reps 2 --json
    for prec in fp32 bf16; do
        step "train ref 192x128 $prec (smoke)" 90 "$MR" bench train --device cuda --net ref --envs 192 --precision $prec --reps 1 --json
    done
    ;;
tests)
    # The C tests' GPU halves (each skips nothing here), then the sanitizers
    # on the ones whose kernels are small enough for them.
    for b in "$CARRY"/test_devmem "$CARRY"/test_cuda_* "$CARRY"/test_bitcompat "$CARRY"/test_trainer*; do
        [ -x "$b" ] || continue
        [[ $(basename "$b") =~ ^(${ONLY:-.*})$ ]] || continue   # ONLY='test_cuda_env|test_bitcompat'
        # OpenBLAS's kernel set changes sgemm's rounding: the fixtures are Haswell's (as ctest runs it)
        step "$(basename "$b")" "${TEST_LIMIT:-240}" env OPENBLAS_CORETYPE=Haswell "$b"
    done
    if command -v compute-sanitizer >/dev/null && [ "${SAN:-1}" = 1 ]; then
        # SAN_RUNS='memcheck:test_cuda_ppo' runs some only (tool:test, space-separated)
        for r in ${SAN_RUNS:-memcheck:test_cuda_ppo memcheck:test_cuda_loss racecheck:test_cuda_ppo memcheck:test_cuda_policy_net}; do
            tool=${r%%:*} t=${r#*:}
            extra=""; [ "$t" = test_cuda_policy_net ] && extra=--quick
            step "$tool $t $extra" "${SAN_LIMIT:-180}" compute-sanitizer --tool "$tool" "$CARRY/$t" $extra
        done
    fi
    ;;
bench)
    # The GPU's bf16 matrix rate, measured now (the MFU's denominator).
    PEAK=$("$PY" - <<'EOF' 2>/dev/null
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True)
s.record()
for _ in range(10): a @ b
e.record(); torch.cuda.synchronize()
print("%.1f" % (10 * 2 * 8192 ** 3 / (s.elapsed_time(e) / 1e3) / 1e12))
EOF
)
    echo "bf16 8192^3 matmul (torch): ${PEAK:-?} TFLOP/s" | tee -a "$LOG"
    P=${PEAK:+--peak-tflops $PEAK}
    step "env 65536" 60 "$MR" bench env --device cuda --envs 65536 --reps 5 --json
    step "env 1048576" 60 "$MR" bench env --device cuda --envs 1048576 --reps 5 --json
    for prec in bf16 fp32; do
        step "train ref 192x128 $prec" 60 "$MR" bench train --device cuda --net ref --envs 192 --precision $prec --reps 3 $P --json
    done
    step "scaling ref bf16" 120 "$MR" bench --scaling 192,1024,4096,16384 --device cuda --net ref --precision bf16 --reps 1 $P --out "$OUT/scaling_gpu_ref.csv"
    # the ref row measures the reference eager and with torch.compile (both columns; the ratio against the faster)
    step "compare env,ref bf16, reference eager and compiled" 320 "$MR" bench --compare --device cuda --rows env,ref --precision bf16 --reps 1 --compile
    ;;
learn)
    # A short run on the cuda profile that must learn: ground truth, the
    # built-in default's schedules, the evaluation table at the end.
    # The evaluation runs on a cpu copy of the weights (docs/cuda.md): at the
    # default 1024 x 4096 it took over 6 minutes on 16 cores, so a smaller one.
    step "train ground_truth on cuda" 420 "$MR" train --hardware cuda --dir /tmp/moonrl-gpu-run \
        --set total_steps=4915200 --set env.mode=ground_truth --set eval.num_envs=256 --set eval.steps=1024
    ;;
ab|window)
    if [ "$w" = window ]; then   # one call: the tests (two sanitizer runs), the A/Bs, the comparison with torch
        SAN_RUNS=${SAN_RUNS:-memcheck:test_cuda_ppo memcheck:test_cuda_conv_cudnn} TEST_LIMIT=${TEST_LIMIT:-120} \
            SAN_LIMIT=${SAN_LIMIT:-60} bash "$HERE/bench/gpu_session.sh" tests
        bash "$HERE/bench/gpu_session.sh" ab
        bash "$HERE/bench/gpu_session.sh" compare
        continue
    fi
    # Issue 50's written-ahead paths, each against the old one in the same
    # call, alternated (A B A B) so a drift of the card falls on both.
    for round in 1 2; do
        for conv in im2col cudnn; do
            step "train ref 192x128 bf16, cuda.conv $conv ($round)" 60 "$MR" bench train --device cuda --net ref \
                --envs 192 --precision bf16 --reps 2 --cuda-conv $conv --json
        done
    done
    # cuda.epilogue: cuBLASLt's fused epilogues against the separate kernels (im2col convs)
    for round in 1 2; do
        for epi in separate fused; do
            step "train ref 192x128 bf16, cuda.epilogue $epi ($round)" 60 "$MR" bench train --device cuda --net ref \
                --envs 192 --precision bf16 --reps 2 --cuda-epilogue $epi --json
        done
    done
    # auto: searches each layer once (cuDNN's own search, then 5 rounds of both), fills the cache, prints its notes
    TAIL=12 step "train ref 192x128 bf16, cuda.conv auto (the search)" 90 "$MR" bench train --device cuda --net ref \
        --envs 192 --precision bf16 --reps 2 --cuda-conv auto --json
    for round in 1 2; do
        step "env 65536, device actions ($round)" 40 "$MR" bench env --device cuda --envs 65536 --reps 5 --json
        step "env 65536, host actions ($round)" 40 "$MR" bench env --device cuda --envs 65536 --reps 5 --host-actions --json
    done
    step "env 1048576, device actions" 40 "$MR" bench env --device cuda --envs 1048576 --reps 5 --json
    # 64-bit sizes: past the old 2,112-environment limit (524,288 samples a minibatch)
    step "train ref 4096x128 bf16 (past 2^31 elements)" 90 "$MR" bench train --device cuda --net ref --envs 4096 \
        --precision bf16 --reps 1 --json
    ;;
compare)
    # only the side-by-side rows of bench (moonrl alone at bf16, then eager and compiled torch)
    step "train ref 192x128 bf16" 60 "$MR" bench train --device cuda --net ref --envs 192 --precision bf16 --reps 2 --json
    step "compare ref bf16, reference eager and compiled" "${COMPARE_LIMIT:-320}" "$MR" bench --compare --device cuda --rows ref --precision bf16 --reps 1 --compile --ref-layout ${REF_LAYOUT:-nchw}
    ;;
table)
    # ENV_SPEC's published table with the reference network (the cuda profile
    # is it): each mode trained on the GPU for TABLE_UPDATES updates of
    # 192 x 128 (ENV_SPEC: 2,048; a window fits fewer, said in the log) and
    # evaluated in its own mode with intervals over eval.runs (on the CPU copy
    # of the weights, docs/cuda.md, hence the small evaluation).
    U=${TABLE_UPDATES:-256}
    echo "table: $U updates of 192 x 128 per mode ($((U * 24576)) agent-steps; ENV_SPEC 2,048)" | tee -a "$LOG"
    # TABLE_STORAGE=uint8: the original's storage bug (docs/evaluation.md), for the published table's shape
    for mode in ${TABLE_MODES:-ground_truth ground_truth_blinded proxy_mortal proxy}; do
        rm -rf "/tmp/moonrl-table-$mode"   # a second table in the same window: a fresh directory
        TAIL=4 step "table $mode" "${TABLE_LIMIT:-110}" "$MR" train --hardware cuda --dir "/tmp/moonrl-table-$mode" \
            --set total_steps=$((U * 24576)) --set env.mode=$mode \
            --set eval.num_envs=${TABLE_EVAL_ENVS:-128} --set eval.steps=1024 --set eval.runs=3 \
            --set env.proxy_obs_storage=${TABLE_STORAGE:-faithful}
        find "/tmp/moonrl-table-$mode" -name eval.md -exec cat {} + 2>/dev/null | tee -a "$LOG"
    done
    ;;
*)
    echo "usage: bench/gpu_session.sh [tests] [smoke] [bench] [learn] [table] [compare] [ab] [window]"; exit 2 ;;
esac
done
echo "log: $LOG; rows: $JSON"
