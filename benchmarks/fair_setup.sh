#!/usr/bin/env bash
# "Runs of ours" as its plan lists them (benchmarks/plan-fair.toml, or PLAN=FILE): the set-up every cell
# shares and the cells in order, from the rows recipes/runs-fair.jsonl holds to this plan's own. Tuning trials
# (held-out training images, never val.beton) go to TUNING_RUNS (default: runs-tuning.jsonl beside RUNS), and a
# tuned cell runs each arm at the LR scale its trials chose. Every finished run is appended at once and a run
# already there is skipped, so the same command resumes; STAGES="a b" runs only those stages' cells (first
# extended sqrt-sgd planned-n tuning one-point tuned).
#
#   benchmarks/fair_setup.sh DATA RUNS [bench options, e.g. --device cuda --workers 4 --threads 1]
#   python -m lightning_lars.report.fair_report --runs RUNS      # the table and verdicts at the planned n
set -euo pipefail
data=${1:?usage: benchmarks/fair_setup.sh DATA RUNS [bench options]}
runs=${2:?usage: benchmarks/fair_setup.sh DATA RUNS [bench options]}
shift 2
label=fair
source "$(dirname "$0")/study_cell.sh"  # cell ARMS SEEDS [options]; sets $here and $py
plan=${PLAN:-$here/benchmarks/plan-fair.toml}
verdict_runs=$runs
tuning_runs=${TUNING_RUNS:-$(dirname "$runs")/runs-tuning.jsonl}
read -r -a base <<<"$("$py" -m lightning_lars.report.plan "$plan" --setup)"
cells=$("$py" -m lightning_lars.report.plan "$plan" ${STAGES:+--stages $STAGES})
while IFS='|' read -r arms seeds options kind; do
    runs=$verdict_runs
    case $kind in
    tuning) runs=$tuning_runs ;;
    tuned:*)  # asked only now: the trials before this cell may have just run
        IFS=: read -r _ ratio rule <<<"$kind"
        for arm in $arms; do
            scale=$("$py" -m lightning_lars.report.plan "$plan" --scale-for "$arm" "$ratio" "$rule" \
                --tuning-runs "$tuning_runs")
            # shellcheck disable=SC2086  # the options are words
            cell "$arm" "$seeds" $options --lr-scale "$scale"
        done
        continue ;;
    esac
    # shellcheck disable=SC2086  # the options are words
    cell "$arms" "$seeds" $options
done <<<"$cells"
echo "[fair] $(date -u +%H:%M:%S) every cell done"
