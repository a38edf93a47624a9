# Call I (H100): the same rms_norm search with HEAD's verify (draws depend on the process's local modules) and with
# the fix (repeatable_draws), alternated, each run with its own empty Triton cache and database.
mkdir -p $OUT/i; cd "$PWD"
python3 -c "import hypothesis, triton, torch; print('hypothesis', hypothesis.__version__, 'triton', triton.__version__, 'torch', torch.__version__)" | tee $OUT/i/versions.txt
python3 -c "from autotune.repeatable_draws import local_constants_controlled as c; print('controlled', c())" | tee -a $OUT/i/versions.txt
run() {  # NAME TREE
  local name=$1 tree=$2
  export TRITON_CACHE_DIR=/tmp/tc-$name AUTOTUNE_DB=/tmp/db-$name.sqlite
  rm -rf $TRITON_CACHE_DIR $AUTOTUNE_DB .hypothesis
  PYTHONPATH=/tmp/site:$tree python3 -P -c 'import autotune.verify as v; print("  code:", v.__file__)' | tee -a $OUT/i/summary.txt
  local t0=$(date +%s.%N)
  PYTHONPATH=/tmp/site:$tree timeout 150 python3 -P -m autotune search rms_norm --gpu H100 --dtype fp16 --shape 8192x4096+res \
    --trials 6 --timeout 20 --final-examples 40 --seed 7 > $OUT/i/$name.log 2>&1
  echo "$name rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a $OUT/i/summary.txt
  grep -a 'evaluated,.*seconds' $OUT/i/$name.log | tail -1 | sed 's/.*rms_norm fp16/  rms_norm fp16/' | tee -a $OUT/i/summary.txt
}
run old-1 $PWD/scratch/old26
run new-1 $PWD
run new-2 $PWD
run old-2 $PWD/scratch/old26
