#!/bin/bash
# Call 1: forward schedule probe, backward breakdown.
mkdir -p /tmp/x
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout -k 10 290 python3 benchmarks/attention_schedule_probe.py --out /tmp/x/attention-schedule-probe 2>&1 | tail -120
timeout -k 10 250 python3 benchmarks/attention_backward_breakdown.py --out /tmp/x/attention-backward-breakdown 2>&1 | tail -60
tar czf $OUT/r.tgz -C /tmp/x .
