# gpu/bench/session.sh — the start every device session script shares (run_all.sh, flex_e2e.sh,
# xattn_e2e.sh, xattn_ab.sh, kvstore_run.sh, tls_run.sh), sourced by bash after the script set OUT
# and PHASES: makes $OUT, sends everything after it to $OUT/run.log as well, defines stamp MSG
# (MSG after the seconds since the start), has PHASE (PHASE is one of $PHASES) and mkmodel8b BUILD
# (the Llama-3-8B-shaped checkpoint in $MODEL8B, made with BUILD/mkmodel unless it is there; the
# script stops if that fails), and describes the machine (GPU, clocks, kernel, cores, memory,
# date). Unpacks the compressed test data the gpu_ tests read (tools/testdata.sh: build/data/).
mkdir -p "$OUT"
sh tools/testdata.sh || echo "tools/testdata.sh failed: tests reading build/data/ will fail"
exec > >(tee -a "$OUT/run.log") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
mkmodel8b() {
    [ -f "$MODEL8B/config.json" ] && return 0
    stamp "mkmodel llama3-8b -> $MODEL8B"
    timeout 300 "$1/mkmodel" --preset llama3-8b --out "$MODEL8B" || exit 1
}
stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv
echo "kernel $(uname -r), $(nproc) cores, $(grep MemTotal /proc/meminfo)"; date -u
