#!/usr/bin/env bash
# Why large-batch LARS loses in "Runs of ours": from today's set-up (quarter-width resnet10t, 8 epochs, 32 px,
# large batch 10 % of the data, the linear LR rule), one factor changed at a time, for small-batch SGD and the
# MLPerf LARS recipe, then You et al.'s LARS. Each line is one cell of bench_largebatch.py; every finished run
# is appended to RUNS at once and a cell already there is skipped, so the same command resumes.
#
#   benchmarks/factor_study.sh DATA RUNS [bench options, e.g. --device cuda --workers 4 --threads 1]
#   python -m lightning_lars.report.factor_study --runs RUNS      # the table and verdicts so far
#
# Seeds come in passes (2 for every cell first, then the third), so the means of every factor are in early;
# within a pass the cells that cost one large-batch run each (ratio, LR rule) come before the longer ones.
set -euo pipefail
data=${1:?usage: benchmarks/factor_study.sh DATA RUNS [bench options]}
runs=${2:?usage: benchmarks/factor_study.sh DATA RUNS [bench options]}
shift 2
label=study
base=()  # today's set-up: bench_largebatch.py's defaults; a cell's options change one factor from it
source "$(dirname "$0")/study_cell.sh"  # cell ARMS SEEDS [options]

for seeds in 2 3; do
    cell "sgd_small lars_mlperf" "$seeds"                          # today's set-up
    cell "sgd_small lars_mlperf" "$seeds" --width full
    cell "lars_mlperf" "$seeds" --ratio 0.025                      # You et al.'s 32k is 2.5 % of ImageNet
    cell "lars_mlperf" "$seeds" --lr-rule sqrt
    cell "lars_mlperf" "$seeds" --lr-rule reference                # MLCommons' reference point at 10 %
    cell "sgd_small lars_mlperf" "$seeds" --epochs 16
    cell "sgd_small lars_mlperf" "$seeds" --resolution 64
done
cell "lars_you" 3
cell "lars_you" 3 --width full
cell "lars_you" 3 --epochs 16
cell "lars_you" 3 --resolution 64
cell "lars_you" 3 --ratio 0.025
cell "lars_you" 3 --lr-rule sqrt
echo "[study] $(date -u +%H:%M:%S) every cell done"
