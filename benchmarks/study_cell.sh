# Sourced by factor_study.sh and fair_setup.sh, not run: after the caller has taken DATA and RUNS off its
# arguments (into $data and $runs), the rest are bench options for every cell. Defines
#   cell ARMS SEEDS [options]   one bench_largebatch.py call: ARMS (quoted, space-separated) at SEEDS seeds,
#                               the caller's $base options, then [options], then the caller's bench options
# and prints "[$label] HH:MM:SS seeds=SEEDS only=ARMS [options]" before it.
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
extra=("$@")

cell() {
    local arms=$1 seeds=$2
    shift 2
    echo "[$label] $(date -u +%H:%M:%S) seeds=$seeds only=$arms $*"
    "$py" "$here/benchmarks/bench_largebatch.py" --data "$data" --runs "$runs" --seeds "$seeds" \
        "${base[@]}" --only $arms "$@" "${extra[@]}"
}
