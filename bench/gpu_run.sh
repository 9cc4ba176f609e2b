#!/bin/bash
# Runs tidepool's GPU tests and GPU benchmarks on a machine with an NVIDIA GPU, writing logs and
# results under $OUT (default bench/out). Phases, so that each fits in one sitting:
#   bench/gpu_run.sh tests          build, GPU tests (C, CUDA, PyTorch, CuPy), compute-sanitizer,
#                                   GPT-2 loss determinism
#   bench/gpu_run.sh adaptors       build, the Python adaptors' GPU tests (PyTorch, CuPy, numba, cuda.core,
#                                   RMM), PyTorch's memory API beside native (test_torch_compat.py,
#                                   JSON in $OUT), and the package installed with pip: python -m tidepool
#   bench/gpu_run.sh train WORKLOADS [STEPS]  real training, five allocators in alternating rounds
#                                   (bench/train.py: seed, gpt2, resnet50, lstm; default 100 steps),
#                                   then one run of each tidepool allocator with its own time measured,
#                                   JSON in $OUT/train_WORKLOADS.json; one workload fits a call.
#                                   ROUNDS=n rounds (default 5), ALLOCATORS=native,tidepool (default
#                                   all five), TIMED_RUNS=n timed runs (default 1)
#   bench/gpu_run.sh record-train [STEPS]  each train.py workload once under each tidepool allocator
#                                   (default 40 steps), its allocations recorded: $OUT/train_traces.tar
#                                   (traces for tidepool replay, and where the live run's steps began and
#                                   its driver calls fell: bench/calls_by_step.py reads them)
#   bench/gpu_run.sh bench          micro-benchmarks (gpu_bench micro, then turns) and trace replays
#                                   against PyTorch's allocator and cudaMallocAsync
#   bench/gpu_run.sh replay         the trace replays alone (both kinds of segment)
#   bench/gpu_run.sh history        what tidepool's history costs: warm replays on the GPU with it off
#                                   and on in turn (gpu_bench history), then the same on the simulated
#                                   device, the allocator alone (bench/history_overhead.sh)
#   bench/gpu_run.sh seed [STEPS]   the seed's loop under four allocators (default 2000 steps), then
#                                   step time alternating PyTorch's allocator and tidepool
#   bench/gpu_run.sh ddp [STEPS]    (2 GPUs) the two-device C test, then GPT-2 small under DDP with
#                                   PyTorch's allocator and with tidepool (default 300 steps)
#   bench/gpu_run.sh fsdp [STEPS]   GPT-2 small under FSDP2 (fully_shard, bfloat16 parameters) on every GPU
#                                   (at most 2; 1 works): PyTorch's allocator and tidepool, each with and
#                                   without expandable segments, then both again with NCCL's register
#                                   hook (registrations counted from NCCL's log); one run each, default
#                                   300 steps, JSON and $OUT/fsdp_summary.md
#   bench/gpu_run.sh reliability    scrub and guard on the GPU, compute-sanitizer over them, and
#                                   tidepool's snapshot rendered by PyTorch's memory visualizer
#   bench/gpu_run.sh expandable     expandable segments: the GPU test (map and unmap cost, peer access
#                                   on 2 GPUs), compute-sanitizer, trace replays against PyTorch's
#                                   expandable segments, the PyTorch test
#   bench/gpu_run.sh expandable-seed [STEPS]  the seed's loop with both allocators' expandable
#                                   segments (default 1000 steps), then alternating step-time runs
#   bench/gpu_run.sh record-seed [STEPS]  the seed's loop (default 250 steps) recorded as a trace through
#                                   tidepool's history, then replayed through every allocator
#   bench/gpu_run.sh suite [FAMILIES]  the workload suite (bench/workloads, seed 0, as
#                                   bench/fragmentation.py writes it) replayed through PyTorch's allocator,
#                                   with and without expandable segments, and cudaMallocAsync, beside
#                                   tidepool's: peak reserved / peak live measured on the GPU for the
#                                   suite's table (GPU_BENCH_ROUNDS=2: each trace is millions of operations)
#   bench/gpu_run.sh pip-only       the install a pip-only user makes: a fresh venv that sees the machine's
#                                   torch, nvcc off the PATH and no CUDA_HOME, pip install ./python, then
#                                   python -m tidepool and a training step, each timed; and where NVIDIA's
#                                   wheels keep CUDA's headers
set -u
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
BUILD=build-gpu
LOG="$OUT/log-$1.txt"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 TIDEPOOL_LIBRARY="$PWD/$BUILD/libtidepool.so"
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') phase $*"

build() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    lscpu | grep -E "^Model name|^CPU\(s\)|^Thread|^L2|^L3" | tr -s ' '
    python3 -c 'import torch, cupy; print("torch", torch.__version__, "cuda", torch.version.cuda, "cupy", cupy.__version__)'
    cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null &&
        cmake --build $BUILD -j "$(nproc)" 2>&1 | grep -E "error|warning|Error" ; true
}

# Step time again, 300-step runs of two allocators in turn, three rounds (ROUNDS=n for more), so drift
# in the GPU's clocks hits both alike; then their medians side by side.
alternate() {
    for round in $(seq 1 "${ROUNDS:-3}"); do
        for alloc in "$1" "$2"; do
            python3 bench/seed_loop.py --allocator "$alloc" --steps 300 --json "$OUT/alt_${alloc}_$round.json" 2>&1 | tail -1
        done
    done
    python3 bench/summarize_alternating.py "$OUT" "$1" "$2" | tee -a "$OUT/seed_summary.md"
}

# Every shipped trace through the three allocators in one process, then both expandable-segment
# variants (one process each).
replays() {
    echo "== replay: every shipped trace, in one process"
    $BUILD/gpu_bench replay traces/*.csv.gz | tee "$OUT/replay.md"
    echo "== the same with expandable segments: PyTorch's, then tidepool's"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $BUILD/gpu_bench replay --only torch traces/*.csv.gz \
        | tail -n +3 | tee -a "$OUT/replay.md"
    TIDEPOOL_CONF=expandable_segments:True $BUILD/gpu_bench replay --only tidepool traces/*.csv.gz \
        | tail -n +3 | tee -a "$OUT/replay.md"
}

case "$1" in
tests)
    build
    echo "== GPU tests"
    ctest --test-dir $BUILD -L gpu --output-on-failure -V 2>&1 | grep -vE "^[0-9]+: Test command|^$"
    echo "== CPU tests on this machine too"
    ctest --test-dir $BUILD -LE gpu -j 8 2>&1 | tail -3
    echo "== compute-sanitizer memcheck"
    export TIDE_NO_DELIBERATE_DRIVER_ERRORS=1
    for cmd in "$BUILD/tests/gpu_cross_stream 30" "$BUILD/tests/test_cuda_backend"; do
        timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $cmd 2>&1 | tail -12
        echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for $cmd"
    done
    timeout 400 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
        python3 tests/gpu/test_torch.py 2>&1 | grep -E "ERROR SUMMARY|FAIL|all passed|failed" | tail -5
    echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for tests/gpu/test_torch.py"
    echo "== GPT-2 losses, PyTorch's allocator against tidepool"
    python3 bench/gpt2_determinism.py --allocator native --steps 50 --json "$OUT/gpt2_native.json" 2>&1 | tail -2
    python3 bench/gpt2_determinism.py --allocator tidepool --steps 50 --json "$OUT/gpt2_tidepool.json" 2>&1 | tail -2
    python3 - "$OUT" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/gpt2_native.json"))["losses"]
b = json.load(open(sys.argv[1] + "/gpt2_tidepool.json"))["losses"]
same = sum(x == y for x, y in zip(a, b))
print("GPT-2: %d of %d steps have bit-identical losses (first %s, last %s)" % (same, len(a), float.fromhex(a[0]), float.fromhex(a[-1])))
PY
    ;;
train)
    build
    python3 -c "import sys; sys.path.insert(0, 'python'); import tidepool.torch as t; t._build_shim()" 2>&1 | tail -2
    python3 bench/train.py --workloads "${2:-seed}" --rounds "${ROUNDS:-5}" --steps "${3:-100}" \
        ${ALLOCATORS:+--allocators "$ALLOCATORS"} --timed-runs "${TIMED_RUNS:-1}" \
        --json "$OUT/train_$(echo "${2:-seed}" | tr , _).json"
    ;;
record-train)
    build
    python3 -c "import sys; sys.path.insert(0, 'python'); import tidepool.torch as t; t._build_shim()" 2>&1 | tail -2
    python3 bench/train.py --record "$OUT/train_traces" --steps "${2:-40}"
    tar -C "$OUT" -cf "$OUT/train_traces.tar" train_traces && rm -r "$OUT/train_traces"
    ;;
adaptors)
    build
    python3 -c "import sys; sys.path.insert(0, 'python'); import tidepool.torch as t; t._build_shim()" 2>&1 | tail -2
    echo "== the Python adaptors' GPU tests"
    ctest --test-dir $BUILD -R "^gpu_(torch|cupy|numba|cuda_core|rmm)$" --output-on-failure -V 2>&1 |
        grep -vE "^[0-9]+: Test command|^$"
    echo "== PyTorch's memory API, native and tidepool"
    python3 tests/gpu/test_torch_compat.py --jobs 4 --json "$OUT/torch_compat.json"
    echo "test_torch_compat exit status: $?"
    echo "== pip install ./python, then python -m tidepool from elsewhere"
    pip install -q --no-build-isolation --no-deps ./python 2>&1 | tail -3
    (cd /tmp && env -u TIDEPOOL_LIBRARY python3 -m tidepool)
    ;;
bench)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    echo "== micro: tidepool, PyTorch's allocator and cudaMallocAsync in one process"
    $BUILD/gpu_bench micro 5 | tee "$OUT/micro.md"
    echo "== the one-thread micro patterns in short turns: the median of 101 rounds' ratios"
    $BUILD/gpu_bench turns 101 | tee "$OUT/turns.md"
    replays
    ;;
replay)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    replays
    ;;
history)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    echo "== the history's cost on the GPU: off and on in turn, one process"
    $BUILD/gpu_bench history 65536 traces/*.csv.gz | tee "$OUT/history_gpu.md"
    echo "== the same on the simulated device (the allocator alone, no kernels)"
    TIDEPOOL_TOOL=$BUILD/tidepool bench/history_overhead.sh 5 | tee "$OUT/history_sim.txt"
    ;;
ddp)
    build
    steps=${2:-300}
    echo "== two devices from eight threads"
    $BUILD/tests/test_two_devices
    echo "test_two_devices exit status: $?"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    for alloc in native tidepool; do
        timeout 280 torchrun --standalone --nproc_per_node=2 bench/ddp_gpt2.py --allocator $alloc \
            --steps "$steps" --json "$OUT/ddp_$alloc" 2>&1 | grep -vE "^W[0-9]|warn|Warn|^\s*$" | tail -6
    done
    python3 bench/summarize_ddp.py "$OUT/ddp_native" "$OUT/ddp_tidepool" | tee "$OUT/ddp_summary.md"
    ;;
fsdp)
    build
    python3 -c "import sys; sys.path.insert(0, 'python'); import tidepool.torch as t; t._build_shim()" 2>&1 | tail -2
    steps=${2:-300}
    nproc=$(nvidia-smi -L | wc -l)
    [ "$nproc" -gt 2 ] && nproc=2
    echo "== GPT-2 small under FSDP2 on $nproc GPU(s), $steps steps, one run per configuration"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    unset TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK
    # fsdp_run NAME ARGS...: one torchrun of fsdp_gpt2.py, JSON as $OUT/fsdp_NAME.rankN.json; with
    # --nccl-register-hook in ARGS, PyTorch's register hook is turned on in its environment.
    fsdp_run() {
        local name=$1 hook=
        shift
        case " $* " in *" --nccl-register-hook "*) hook=TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 ;; esac
        echo "== $name"
        timeout 240 env $hook torchrun --standalone --nproc_per_node="$nproc" bench/fsdp_gpt2.py --steps "$steps" \
            --json "$OUT/fsdp_$name" "$@" 2>&1 | grep -vE "^W[0-9]|warn|Warn|^\s*$" | tail -8
        echo "fsdp $name exit status: ${PIPESTATUS[0]}"
    }
    fsdp_run native --allocator native
    fsdp_run native_expandable --allocator native --native-conf expandable_segments:True
    fsdp_run tidepool --allocator tidepool
    fsdp_run tidepool_expandable --allocator tidepool --tidepool-conf expandable_segments:True
    fsdp_run tidepool_hook --allocator tidepool --nccl-register-hook
    fsdp_run native_hook --allocator native --nccl-register-hook
    python3 bench/summarize_fsdp.py "$OUT"/fsdp_native "$OUT"/fsdp_native_expandable "$OUT"/fsdp_tidepool \
        "$OUT"/fsdp_tidepool_expandable "$OUT"/fsdp_tidepool_hook "$OUT"/fsdp_native_hook | tee "$OUT/fsdp_summary.md"
    ;;
reliability)
    build
    echo "== scrub and guard"
    $BUILD/tests/gpu_scrub_guard
    echo "gpu_scrub_guard exit status: $?"
    TIDE_NO_DELIBERATE_DRIVER_ERRORS=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
        $BUILD/tests/gpu_scrub_guard 2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3
    echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for gpu_scrub_guard"
    echo "== snapshot of the seed's loop, rendered by torch/cuda/_memory_viz.py"
    python3 bench/snapshot_viz.py "$OUT/viz" 5
    echo "snapshot_viz exit status: $?"
    ;;
expandable)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    echo "== expandable segments on the GPU"
    $BUILD/tests/gpu_expandable
    echo "gpu_expandable exit status: $?"
    TIDE_GPU_OPS=500 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/tests/gpu_expandable \
        2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3
    echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for gpu_expandable"
    echo "== replay: each allocator in its own process (configurations are read at start)"
    TIDEPOOL_CONF=expandable_segments:True $BUILD/gpu_bench replay --only tidepool traces/*.csv.gz \
        | tee "$OUT/replay_expandable.md"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $BUILD/gpu_bench replay --only pytorch traces/*.csv.gz \
        | tail -n +3 | tee -a "$OUT/replay_expandable.md"
    $BUILD/gpu_bench replay --only tidepool traces/*.csv.gz | tail -n +3 | tee -a "$OUT/replay_expandable.md"
    $BUILD/gpu_bench replay --only pytorch traces/*.csv.gz | tail -n +3 | tee -a "$OUT/replay_expandable.md"
    echo "== the PyTorch test with tidepool's expandable segments"
    TIDEPOOL_CONF=expandable_segments:True python3 tests/gpu/test_torch.py 2>&1 | tail -4
    echo "test_torch exit status: ${PIPESTATUS[0]}"
    ;;
expandable-seed)
    build
    steps=${2:-1000}
    echo "== the seed's loop"
    for alloc in expandable tidepool-expandable native tidepool; do
        python3 bench/seed_loop.py --allocator $alloc --steps "$steps" --json "$OUT/seed_$alloc.json" 2>&1 | tail -1
    done
    python3 bench/summarize_seed.py "$OUT"/seed_*.json | tee "$OUT/seed_summary.md"
    alternate expandable tidepool-expandable
    ;;
seed)
    build
    steps=${2:-2000}
    for alloc in native expandable async tidepool; do
        python3 bench/seed_loop.py --allocator $alloc --steps "$steps" --json "$OUT/seed_$alloc.json" 2>&1 | tail -3
    done
    python3 bench/summarize_seed.py "$OUT"/seed_*.json | tee "$OUT/seed_summary.md"
    alternate native tidepool
    ;;
record-seed)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    steps=${2:-250}
    echo "== the seed's loop, $steps steps, recorded as a trace (empty_cache every 100 steps included)"
    python3 bench/seed_loop.py --allocator native --steps "$steps" --json "$OUT/seed_native.json" 2>&1 | tail -1
    python3 bench/seed_loop.py --allocator tidepool --steps "$steps" --json "$OUT/seed_tidepool.json" 2>&1 | tail -1
    python3 bench/seed_loop.py --allocator tidepool --steps "$steps" --record-trace "$OUT/seed_loop.csv.gz" \
        --json "$OUT/seed_recording.json" 2>&1 | tail -1
    echo "== the recorded trace replayed through each allocator"
    $BUILD/gpu_bench replay "$OUT/seed_loop.csv.gz" | tee "$OUT/replay_seed_loop.md"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $BUILD/gpu_bench replay --only pytorch "$OUT/seed_loop.csv.gz" \
        | tail -n +3 | tee -a "$OUT/replay_seed_loop.md"
    ;;
suite)
    build
    bench/build_gpu_bench.sh $BUILD || exit 1
    families=()
    for f in $(echo "${2:-}" | tr , ' '); do families+=(--family "$f"); done
    echo "== the suite's traces, written on this machine"
    python3 -m bench.workloads "$OUT/suite" "${families[@]}" | tail -2
    export GPU_BENCH_ROUNDS=${GPU_BENCH_ROUNDS:-2}
    echo "== each trace through tidepool, PyTorch's allocator and cudaMallocAsync, in one process"
    $BUILD/gpu_bench replay "$OUT"/suite/*.csv.gz | tee "$OUT/suite_replay.md"
    echo "== expandable segments: PyTorch's, then tidepool's"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $BUILD/gpu_bench replay --only pytorch "$OUT"/suite/*.csv.gz \
        | tail -n +3 | tee -a "$OUT/suite_replay.md"
    TIDEPOOL_CONF=expandable_segments:True $BUILD/gpu_bench replay --only tidepool "$OUT"/suite/*.csv.gz \
        | tail -n +3 | tee -a "$OUT/suite_replay.md"
    rm -r "$OUT/suite"
    ;;
pip-only)
    build
    SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    echo "== where NVIDIA's wheels keep CUDA's headers (torch's CUDA_HOME: $(python3 -c 'import torch.utils.cpp_extension as c; print(c.CUDA_HOME)'))"
    find "$SP/nvidia" -maxdepth 4 -name include -type d 2>/dev/null | head -20
    find "$SP/nvidia" -name cuda_runtime_api.h 2>/dev/null | head -3
    venv=$(mktemp -d)/venv
    # A plain venv that sees torch's site-packages through a .pth file: --system-site-packages would
    # show the system's, and torch may live in a venv of its own.
    python3 -m venv "$venv"
    echo "$SP" > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine_torch.pth"
    "$venv/bin/python" -c 'import torch; print("the venv sees torch", torch.__version__, "at", torch.__file__)'
    nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")
    path=$(echo "$PATH" | tr : '\n' | grep -vx "$nvcc_dir" | paste -sd:)
    echo "== pip install --no-build-isolation ./python (nvcc off the PATH, no CUDA_HOME)"
    time env -u CUDA_HOME -u CUDA_PATH -u TIDEPOOL_LIBRARY PATH="$venv/bin:$path" \
        pip install -v --no-build-isolation ./python 2>&1 | grep -E "^ *tidepool:|rror|Successfully" | tail -8
    echo "== python -m tidepool, then the first enable() and a training step"
    (cd /tmp && time env -u CUDA_HOME -u CUDA_PATH -u TIDEPOOL_LIBRARY PATH="$venv/bin:$path" python -m tidepool)
    (cd /tmp && time env -u CUDA_HOME -u CUDA_PATH -u TIDEPOOL_LIBRARY PATH="$venv/bin:$path" python -c "
import time, torch, tidepool.torch as tt
t0 = time.time(); tt.enable(); print('enable() %.1f s' % (time.time() - t0))
net = torch.nn.Linear(1024, 1024).cuda(); opt = torch.optim.AdamW(net.parameters())
net(torch.randn(64, 1024, device='cuda')).sum().backward(); opt.step(); torch.cuda.synchronize()
print('a training step under', torch.cuda.memory.get_allocator_backend())")
    ;;
*)
    echo "usage: bench/gpu_run.sh tests | adaptors | train WORKLOADS [STEPS] | record-train [STEPS] | bench | history | seed [STEPS] | ddp [STEPS] | fsdp [STEPS] | reliability | expandable | expandable-seed [STEPS] | record-seed [STEPS] | suite [FAMILIES] | pip-only"; exit 2 ;;
esac
