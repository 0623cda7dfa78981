"""Lightning callbacks: schedules, throughput, time-to-target, trust ratios, divergence guard."""
