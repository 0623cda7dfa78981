"""The end of a run: the results table beside the published numbers, ``results.json``, ``report.png``, the
W&B logger and the run's provenance; the runs files' lines (``runs_file``); the README's "Runs of ours" from
recipes/runs.jsonl (``runs_table``), each verdict on the published claim its arm stands for (``claims``); the fair
set-up's plan file and its verdicts at the planned n with Holm's correction, in or out of each claim's scope, each
arm read at the LR scale its held-out trials chose (``plan``, ``fair_report``, ``verdict_rows``).
A run's numbers arrive here as data.

Imports ``core``, ``config`` and ``runtime`` (the run folder's file names).
"""
