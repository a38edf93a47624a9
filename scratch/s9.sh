# Call 9: attention host probe (fwd, fwd+bwd: do_bench, graph, host), and a profile of flash_attn's fwd+bwd host path.
mkdir -p /tmp/x
timeout -k 5 200 python3 benchmarks/attention_host_probe.py --out /tmp/x/attention-host-probe 2>&1 | grep -v "^\[" | tail -20
timeout -k 5 60 python3 scratch/prof_attn.py > /tmp/x/prof.txt 2>&1; head -60 /tmp/x/prof.txt | cut -c1-160
tar czf $OUT/r.tgz -C /tmp x
