#!/usr/bin/env bash
# One device call on a 2-GPU or 4-GPU H100 machine: cudakit.distributed's multi-GPU tests (NCCL
# collectives vs NumPy, data parallel, overlap trace, faults, two simulated nodes over sockets),
# the all_reduce bus-bandwidth sweep 8 KB..1 GB float32 in place for cudakit, CuPy's raw binding
# and torch.distributed (NCCL) in the same run, the GPT example data-parallel (throughput against
# one GPU, a Chrome trace of one step, two simulated nodes), then a short table.
#   bash scripts/gpu_check_distributed.sh
# On 4 GPUs every part runs with 4 ranks and again with 2 (the first two GPUs: CUDA_VISIBLE_DEVICES).
# RANKS="2 4" picks the rank counts; PARTS="tests bench dp" the parts (TESTS_K: a pytest -k for the tests) (split a run over two device
# calls with PARTS=tests then PARTS="bench dp"; the table reads whatever $OUT holds).
# Results under $OUT: log.txt, bench_{cudakit,torch}_N.json, dp_overlap_trace.json,
# gpt_dp_trace_N.json, dp_gpt.json.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0); nothing here creates multicast objects.
set -u
OUT=${OUT:-/tmp/cudakit-dist-out}
mkdir -p "$OUT"
export OUT PYTHONPATH="$PWD/src:$PWD/tests" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUDAKIT_CACHE_DIR=${CUDAKIT_CACHE_DIR:-/tmp/cudakit-cache}
# CuPy loads libnccl.so.2: from the NCCL wheel (nvidia-nccl-cu13/-cu12) when one is installed
NCCL_LIB=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null) \
  && export LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}"
. scripts/cudnn_env.sh   # the carried cudnn frontend, where there is one
LOG="$OUT/log.txt"
NGPU=$(nvidia-smi -L | wc -l)
RANKS=${RANKS:-$( [ "$NGPU" -ge 4 ] && echo "4 2" || echo "$NGPU" )}
PARTS=${PARTS:-tests bench dp}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
first_gpus() { seq -s, 0 $(( $1 - 1 )); }
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv
  nvidia-smi topo -m
  env | grep '^NCCL_' | sort
  python3 -c "import cupy; from cupy.cuda import nccl; print('CuPy', cupy.__version__, 'NCCL', nccl.get_version(), 'available', nccl.available)"
  python3 -c "import torch; print('torch', torch.__version__, 'NCCL', torch.cuda.nccl.version())"
  python3 -m cudakit info 2>&1 | grep -iE "cudnn|triton" | head -4
  echo "ranks: $RANKS; parts: $PARTS; host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  # a CPU quota below the cores nproc reports would throttle two busy ranks where one runs freely
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null)"
  echo "cgroup cpu.stat: $(tr '\n' ' ' < /sys/fs/cgroup/cpu.stat 2>/dev/null || tr '\n' ' ' < /sys/fs/cgroup/cpu/cpu.stat 2>/dev/null)"
  lscpu | grep -E "^(Model name|Thread\(s\) per core|NUMA node)" 
} 2>&1 | tee -a "$LOG"

# 1. the multi-GPU tests (faults, debug check, unreachable store and the two-node simulation
#    included) on every GPU, then the collectives against NumPy again on the first two
if has tests; then
  timeout ${TEST_TIMEOUT:-330} python3 -m pytest -q -rs -v -m "cuda or multi_gpu" tests/gpu/test_distributed_gpu.py \
    tests/gpu/test_gather_copy_gpu.py ${TESTS_K:+-k "$TESTS_K"} -p no:cacheprovider 2>&1 | tee -a "$LOG" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|OVERLAP|REC |Error" | tail -30
  if [ "$NGPU" -gt 2 ]; then
    CUDA_VISIBLE_DEVICES=0,1 timeout 120 python3 -m pytest -q -v -m "cuda or multi_gpu" \
      "tests/gpu/test_distributed_gpu.py::test_every_collective_matches_numpy_on_every_gpu" -p no:cacheprovider 2>&1 \
      | tee -a "$LOG" | grep -E "PASSED|FAILED|ERROR" | sed 's/^/ON-2-GPUS /'
  fi
fi

# 2. all_reduce bus bandwidth: cudakit and CuPy's raw binding on the same ranks, then torch.distributed
if has bench; then
  for n in $RANKS; do
    export CUDA_VISIBLE_DEVICES=$(first_gpus "$n")
    timeout ${BENCH_TIMEOUT:-150} python3 -m cudakit run --nproc-per-node "$n" --master-port 29610 \
      scripts/dist_allreduce_bench.py --impl cudakit,cupy --out "$OUT/bench_cudakit_$n.json" 2>&1 | tee -a "$LOG" | tail -2
    timeout ${BENCH_TIMEOUT:-150} python3 -m torch.distributed.run --nproc-per-node "$n" --master-port 29620 \
      scripts/dist_allreduce_bench.py --impl torch --out "$OUT/bench_torch_$n.json" 2>&1 | tee -a "$LOG" | tail -2
    unset CUDA_VISIBLE_DEVICES
  done
fi

# 3. the GPT example data-parallel: step time on one GPU and on n (throughput = n * t1 / tn,
#    acceptance >= 1.85 on 2) with a Chrome trace of one more step, then two simulated nodes of one
#    GPU each over sockets against one node of 2 GPUs (float32 tiny preset, dropout off: the printed
#    losses must match)
if has dp; then
  GPT="examples/train_gpt.py --backend cuda --preset gpt-issue --dtype bfloat16 --steps ${DP_STEPS:-30}"
  nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,utilization.gpu \
    --format=csv 2>&1 | sed 's/^/DP-GPUS /' | tee -a "$LOG"
  CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 $GPT --trace /tmp/gpt_1gpu_trace.json 2>&1 | tee /tmp/dp_1.txt \
    | grep -E "^(done|trace):" | sed 's/^/DP-1GPU /'
  # DP_EACH_GPU=1: the one-GPU step on every other GPU too (a data-parallel step waits for the slowest)
  if [ "${DP_EACH_GPU:-0}" = 1 ]; then
    for i in $(seq 1 $(( NGPU - 1 ))); do
      CUDA_VISIBLE_DEVICES=$i timeout ${DP_TIMEOUT:-120} python3 $GPT 2>&1 | grep -E "^done:" | sed "s/^/DP-1GPU [gpu $i] /" \
        | tee -a "$LOG"
    done
  fi
  # DP_CONCURRENT=1: the one-GPU step on GPU 0 and GPU 1 at the same time, two processes and no
  # group (what two busy ranks cost each other on this host without any communication)
  if [ "${DP_CONCURRENT:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=1 timeout ${DP_TIMEOUT:-120} python3 $GPT > /tmp/dp_conc1.txt 2>&1 &
    CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 $GPT > /tmp/dp_conc0.txt 2>&1
    wait
    for i in 0 1; do grep -E "^done:" /tmp/dp_conc$i.txt | sed "s/^/DP-CONC [gpu $i] /" | tee -a "$LOG"; done
    python3 scripts/step_times.py "DP-CONC-STEPS [gpu 0]" /tmp/dp_conc0.txt | tee -a "$LOG"
    echo "DP-CGROUP after the concurrent runs: $(tr '\n' ' ' < /sys/fs/cgroup/cpu.stat 2>/dev/null)" | tee -a "$LOG"
  fi
  python3 scripts/step_times.py "DP-1GPU-STEPS" /tmp/dp_1.txt | tee -a "$LOG"
  for n in $RANKS; do
    # which processes hold a context on which GPU, mid-run (a rank with work on another rank's GPU time-slices it)
    ( sleep 15; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv 2>&1 | sed 's/^/DP-APPS /'
      nvidia-smi --query-gpu=index,clocks.sm,power.draw,utilization.gpu,clocks_throttle_reasons.active --format=csv 2>&1 \
        | sed 's/^/DP-GPUS-MIDRUN /'; top -H -b -n 2 -d 1 -w 120 | awk '/^top -/{n++} n==2' | sed -n '7,16p' | sed 's/^/DP-CPU /' ) &
    CUDA_VISIBLE_DEVICES=$(first_gpus "$n") timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node "$n" \
      --master-port 29630 $GPT --trace "$OUT/gpt_dp_trace_$n.json" 2>&1 | tee /tmp/dp_$n.txt \
      | grep -E "rank[0-9]+\]: (done|trace):" | sed "s/^/DP-${n}GPU /"
    python3 scripts/step_times.py "DP-${n}GPU-STEPS" /tmp/dp_$n.txt | tee -a "$LOG"
    echo "DP-CGROUP after ${n} ranks: $(tr '\n' ' ' < /sys/fs/cgroup/cpu.stat 2>/dev/null)" | tee -a "$LOG"
  done
  # DP_AB=1: the 2-rank step again under variants (DP_VARIANTS: ";"-separated, each environment
  # assignments or example arguments): by default NCCL held to 4, 8 and 16 channels (SMs), no bucket taper
  if [ "${DP_AB:-0}" = 1 ]; then
    IFS=';' read -ra VS <<< "${DP_VARIANTS:-NCCL_MAX_NCHANNELS=4;NCCL_MAX_NCHANNELS=8;NCCL_MAX_NCHANNELS=16;--tail-bucket-mb 0}"
    for v in "${VS[@]}"; do
      case "$v" in --*) e=""; a="$v";; *) e="$v"; a="";; esac
      env $e CUDA_VISIBLE_DEVICES=0,1 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 2 \
        --master-port 29635 $GPT $a --trace /tmp/ab.json > /tmp/dp_ab.txt 2>&1
      grep -E "rank[0-9]+\]: (done|trace):" /tmp/dp_ab.txt | sed "s/^/DP-AB [$v] /" | tee -a "$LOG"
      python3 scripts/step_times.py "DP-AB-STEPS [$v]" /tmp/dp_ab.txt | tee -a "$LOG"
    done
  fi
  # DP_GRAPH=1: the same comparison with --graph on both sides (one GPU: forward and backward
  # replayed, AdamW eager; data parallel: the whole step with its NCCL all-reduces replayed)
  if [ "${DP_GRAPH:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 $GPT --graph > /tmp/dp_g1.txt 2>&1
    grep -E "^done:" /tmp/dp_g1.txt | sed 's/^/DP-GRAPH-1GPU /' | tee -a "$LOG"
    CUDA_VISIBLE_DEVICES=0,1 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 2 \
      --master-port 29637 $GPT --graph > /tmp/dp_g2.txt 2>&1
    grep -E "rank[0-9]+\]: (done|data parallel)|Error" /tmp/dp_g2.txt | sed 's/^/DP-GRAPH-2GPU /' | tee -a "$LOG"
    python3 scripts/step_times.py "DP-GRAPH-2GPU-STEPS" /tmp/dp_g2.txt | tee -a "$LOG"
  fi
  # DP_PROFILE=1: where the eager step's host time goes, one GPU and rank 0 of two (--profile-host)
  if [ "${DP_PROFILE:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 $GPT --profile-host 2>&1 | grep -E "host-profile|^done" \
      | sed 's/^/DP-PROFILE-1GPU /' | tee -a "$LOG"
    CUDA_VISIBLE_DEVICES=0,1 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 2 --master-port 29639 \
      $GPT --profile-host 2>&1 | grep -E "rank0\]: (host-profile|done)" | sed 's/^/DP-PROFILE-2GPU /' | tee -a "$LOG"
  fi
  # DP_PROBE=1: the one-GPU step plain and with the data-parallel path over a one-rank group (host
  # time against step time: is the data-parallel cost on the host or on the GPU)
  if [ "${DP_PROBE:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 scripts/dp_overhead_probe.py 2>&1 | tee -a "$LOG" \
      | grep -E "^DP-PROBE"
  fi
  cat /tmp/dp_1.txt /tmp/dp_[0-9]*.txt >> "$LOG" 2>/dev/null
  TINY="examples/train_gpt.py --backend cuda --preset tiny --dropout 0 --steps 8"
  CUDA_VISIBLE_DEVICES=0,1 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 2 --master-port 29640 $TINY 2>&1 \
    | grep -E "step [0-9]+ loss" | sed 's/ time .*//' > /tmp/dp_one_node.txt
  ( export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    CUDA_VISIBLE_DEVICES=0 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 1 --nnodes 2 --node-rank 0 \
      --master-addr 127.0.0.1 --master-port 29650 $TINY > /tmp/dp_node0.txt 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout ${DP_TIMEOUT:-120} python3 -m cudakit run --nproc-per-node 1 --nnodes 2 --node-rank 1 \
      --master-addr 127.0.0.1 --master-port 29650 $TINY > /tmp/dp_node1.txt 2>&1
    wait )
  grep -E "step [0-9]+ loss" /tmp/dp_node0.txt | sed 's/ time .*//' > /tmp/dp_two_nodes.txt
  cat /tmp/dp_node0.txt /tmp/dp_node1.txt >> "$LOG"
  python3 - "$OUT" "$RANKS" "$GPT" <<'PY' 2>&1 | tee -a "$LOG"
import json, re, subprocess, sys, time
out, ranks, gpt = sys.argv[1], [int(n) for n in sys.argv[2].split()], sys.argv[3]
def median(path):   # the slowest rank's median step time (each rank prints its own)
    try:
        ms = [float(x) for x in re.findall(r"median step time ([0-9.]+) ms", open(path).read())]
    except OSError:
        return None
    return max(ms) if ms else None
t1 = median("/tmp/dp_1.txt")
tg1, tg2 = median("/tmp/dp_g1.txt"), median("/tmp/dp_g2.txt")
res = {"what": "examples/train_gpt.py data parallel (cudakit run; GradSync buckets filled by the backward's hook), "
               "gpt-issue preset bf16, each rank its own batch; two simulated nodes over sockets against one node",
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "device": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True).stdout.split("\n")[0].strip(),
       "commands": {"one_gpu": f"CUDA_VISIBLE_DEVICES=0 python3 {gpt}",
                    "n_gpus": f"python3 -m cudakit run --nproc-per-node N {gpt} --trace gpt_dp_trace_N.json"},
       "median_step_ms": {"1": t1}, "throughput_vs_one_gpu": {}, "trace_overlap": {}}
for n in ranks:
    tn = median(f"/tmp/dp_{n}.txt")
    res["median_step_ms"][str(n)] = tn
    try:
        res["trace_overlap"][str(n)] = [l for l in open(f"/tmp/dp_{n}.txt").read().splitlines() if "trace:" in l][-1]
    except (OSError, IndexError):
        pass
    if t1 and tn:
        res["throughput_vs_one_gpu"][str(n)] = round(n * t1 / tn, 3)
        print(f"DP GPT gpt-issue bf16: 1 GPU {t1:.2f} ms/step, {n} GPUs {tn:.2f} ms/step (each rank its batch): "
              f"throughput {n * t1 / tn:.3f}x one GPU" + (" (acceptance >= 1.85)" if n == 2 else ""))
    else:
        print(f"DP GPT on {n}: no step times (see the log)")
if tg1 and tg2:
    res["graph"] = {"one_gpu_ms": tg1, "two_gpus_ms": tg2, "x_throughput_2gpus_vs_one": round(2 * tg1 / tg2, 3),
                    "command": f"the same with --graph (one GPU: forward and backward replayed; 2 GPUs: the whole "
                               f"data-parallel step replayed)"}
    print(f"DP GPT --graph: 1 GPU {tg1:.2f} ms/step, 2 GPUs {tg2:.2f} ms/step: throughput {2 * tg1 / tg2:.3f}x "
          f"one GPU (acceptance >= 1.85)")
one = [re.sub(r"^\[rank\d+\]: ", "", l) for l in open("/tmp/dp_one_node.txt").read().split("\n") if l]
two = [re.sub(r"^\[rank\d+\]: ", "", l) for l in open("/tmp/dp_two_nodes.txt").read().split("\n") if l]
same = bool(one) and one == two
res["tiny_losses_one_node"], res["tiny_losses_two_nodes"] = one, two
print(f"DP two simulated nodes (sockets) vs one node: {len(two)} loss lines, "
      f"{'identical' if same else 'DIFFERENT'}" + ("" if same else f"\n one node: {one}\n two nodes: {two}"))
json.dump(res, open(f"{out}/dp_gpt.json", "w"), indent=1)
PY
fi

# 4. the table (last)
python3 - "$OUT" "$RANKS" <<'PY' 2>&1 | tee -a "$LOG"
import json, os, re, sys
out, ranks = sys.argv[1], [int(n) for n in sys.argv[2].split()]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        print(f"(no {name}: {e})"); return {}
for n in ranks:
    ck, th = load(f"bench_cudakit_{n}.json"), load(f"bench_torch_{n}.json")
    rows = {}
    for impl, src in (("cudakit", ck), ("cupy", ck), ("torch", th)):
        for r in src.get(impl, []):
            rows.setdefault(r["bytes"], {})[impl] = r
    if not rows:
        continue
    print(f"\nall_reduce float32 in place, {ck.get('ranks', '?')} x {ck.get('device', '?')} (busbw GB/s; time us)")
    print(f"{'bytes':>11} {'cudakit':>16} {'cupy raw':>16} {'torch':>16} {'ck/torch':>8}")
    def cell(r):
        return f"{r['busbw_gbs']:7.1f} {r['time_us']:7.1f}" if r else f"{'-':>15}"
    for b in sorted(rows):
        d = rows[b]
        ratio = d["cudakit"]["busbw_gbs"] / d["torch"]["busbw_gbs"] if "cudakit" in d and "torch" in d else float("nan")
        print(f"{b:>11} {cell(d.get('cudakit')):>16} {cell(d.get('cupy')):>16} {cell(d.get('torch')):>16} {ratio:8.3f}")
    big = [rows[b]["cudakit"]["busbw_gbs"] / rows[b]["torch"]["busbw_gbs"] for b in rows
           if b >= 64 << 20 and "cudakit" in rows[b] and "torch" in rows[b]]
    small = rows.get(8 << 10, {})
    if big:
        print(f"{n} ranks, from 64 MB up: min cudakit/torch busbw = {min(big):.3f} (acceptance >= 0.95)")
    if "cudakit" in small and "torch" in small:
        c, t = small["cudakit"]["time_us"], small["torch"]["time_us"]
        raw = small.get("cupy", {}).get("time_us", float("nan"))
        print(f"{n} ranks, 8 KB: cudakit {c:.1f} us, torch {t:.1f} us, raw CuPy {raw:.1f} us; cudakit layer "
              f"{c - raw:.1f} us (acceptance: <= torch, layer <= 20 us)")
dp = load("dp_gpt.json")
for n, x in dp.get("throughput_vs_one_gpu", {}).items():
    print(f"DP GPT {n} GPUs: {x:.3f}x one GPU; {dp.get('trace_overlap', {}).get(n, '')}")
log = open(os.path.join(out, "log.txt")).read()
for name in re.findall(r"test_distributed_gpu.py::(\w+) (PASSED|FAILED|ERROR|SKIPPED)", log):
    print(f"{name[1]:<8} {name[0]}")
PY
