# Helpers for a device call that runs several stages and brings its logs back (source it from the repo root):
#
#   BUDGET=560 SHIPPED_START=path/to/shipped-copy.sqlite; . benchmarks/device_calls.sh
#   stage NAME SECS CMD...   run CMD under a SECS limit (never past BUDGET seconds from the start of the call);
#                            stdout and stderr to /tmp/x/NAME.log; `at ...` means `python3 -m autotune ...`; then
#                            `keep`
#   search_missing KERNEL DTYPE SECS ARGS...
#                            a stage searching KERNEL's presets in DTYPE that neither /tmp/x/shipped.sqlite nor
#                            $AUTOTUNE_DB holds a current row for (benchmarks/missing_presets.py), with ARGS
#                            (--trials, --warm-start, ...); nothing when none is missing. Each study gets
#                            --timeout (its share of SECS less FINAL_SECS) unless ARGS give one, so it stops asking
#                            for trials in time to finish the trial in flight and its final check, and stores its
#                            row before SECS cut it. A call cut short by SECS keeps the studies it finished, and the
#                            next call's search_missing goes on from there
#   study_timeout SECS N     that --timeout for N studies in SECS (for a `stage ... at search` of your own)
#   ship KERNEL...           export this GPU's current-source rows of KERNEL from $AUTOTUNE_DB (/tmp/tuned.sqlite)
#                            and merge them into /tmp/x/shipped.sqlite (a faster row replaces a slower one); skipped
#                            once BUDGET is spent (`autotune db export` / `db merge` of $OUT/tuned.sqlite do it later)
#   keep                     copy $AUTOTUNE_DB (the rows the call's searches stored and verified) to $OUT/tuned.sqlite:
#                            it comes back even if the device tool's limit cuts the call off before `pack` (the tool
#                            returns what $OUT holds then); one file, of the 8 the tool brings back
#   pack                     tar /tmp/x into $OUT/r.tgz: every log, the shipped copy, the exports; and Triton's
#                            kernel cache (binaries and metadata, no intermediate IR) into $OUT/triton-cache.tgz
#
# Compiled kernels carry over between machines: every call compiles into /tmp/triton-cache (TRITON_CACHE_DIR, which
# search workers inherit), a fresh machine's starts from TRITON_CACHE_START (a triton-cache.tgz an earlier call
# brought back, carried with the call) where given, so a config compiled once (a search's winner, then its
# `db verify` and its bench) is not compiled again on the next machine.
# /tmp/x and /tmp/tuned.sqlite outlive the call while the machine stays warm, so the next call's stages see them;
# on a fresh machine /tmp/x/shipped.sqlite starts as SHIPPED_START (default: the package's shipped.sqlite), and the
# call's log says so. A call cannot know whether it gets the warm machine: give every call script SHIPPED_START.
# GPU: the name rows are stored under (default H100). CALL_T0: the call's start (date +%s) where the command did work
# before sourcing this file (installs): BUDGET counts from it, so the device tool's limit is not overrun by what came
# before.
export AUTOTUNE_DB=${AUTOTUNE_DB:-/tmp/tuned.sqlite}
GPU=${GPU:-H100}
BUDGET=${BUDGET:-560}
mkdir -p /tmp/x
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
if [ ! -d "$TRITON_CACHE_DIR" ] && [ -f "${TRITON_CACHE_START:-}" ]; then
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf "$TRITON_CACHE_START" -C "$TRITON_CACHE_DIR"
  echo "fresh machine: Triton's cache starts from $TRITON_CACHE_START ($(du -sh "$TRITON_CACHE_DIR" | cut -f1))" | tee -a /tmp/x/calls.log
fi
if [ ! -f /tmp/x/shipped.sqlite ]; then  # a fresh machine: say which file the shipped copy starts from
  cp "${SHIPPED_START:-autotune/db/shipped.sqlite}" /tmp/x/shipped.sqlite
  echo "fresh machine: /tmp/x/shipped.sqlite starts as ${SHIPPED_START:-autotune/db/shipped.sqlite}" | tee -a /tmp/x/calls.log
fi
T0=${CALL_T0:-$(date +%s)}
echo "call start $(date -u +%FT%TZ); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee -a /tmp/x/calls.log
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())" \
  | tee -a /tmp/x/calls.log

stage() {
  local name=$1 secs=$2; shift 2
  [ "$1" = at ] && { shift; set -- python3 -m autotune "$@"; }
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if [ "$left" -lt 20 ]; then echo "SKIP $name (only ${left}s left)" | tee -a /tmp/x/calls.log; return 0; fi
  [ "$secs" -gt "$left" ] && secs=$left
  local started=$(date +%s)
  echo "== $name: $* (limit ${secs}s)" | tee -a /tmp/x/calls.log
  timeout -k 5 "$secs" "$@" > "/tmp/x/$name.log" 2>&1
  echo "== $name rc=$? $(( $(date +%s) - started ))s" | tee -a /tmp/x/calls.log
  tail -25 "/tmp/x/$name.log"
  keep
}

keep() {
  if [ -n "${OUT:-}" ] && [ -f "$AUTOTUNE_DB" ] && ! [ "$AUTOTUNE_DB" -ef "$OUT/tuned.sqlite" ]; then
    # SQLite's backup: the rows a search still holds in its write-ahead log come too (a plain copy misses them)
    python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
      "$AUTOTUNE_DB" "$OUT/tuned.sqlite"
  fi
}

FINAL_SECS=${FINAL_SECS:-70}
# What a study needs after its --timeout: the trial in flight (an attention config compiles in ~35 s on the H100's
# host) and the final check of its best config (~25 s).

study_timeout() {
  local per=$(( $1 / $2 - FINAL_SECS ))
  echo $(( per > 20 ? per : 20 ))
}

search_missing() {
  local kernel=$1 dtype=$2 secs=$3 shapes; shift 3
  shapes=$(python3 benchmarks/missing_presets.py "$kernel" "$dtype" "$GPU" /tmp/x/shipped.sqlite "$AUTOTUNE_DB")
  [ -z "$shapes" ] && { echo "search_missing $kernel $dtype: none missing" | tee -a /tmp/x/calls.log; return 0; }
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  [ "$secs" -gt "$left" ] && secs=$left  # as stage will cut it
  local timeout=(--timeout "$(study_timeout "$secs" "$(echo "$shapes" | grep -o -- '--shape' | wc -l)")")
  case " $* " in *" --timeout "*) timeout=() ;; esac
  # shellcheck disable=SC2086  # $shapes is a list of --shape arguments
  stage "s-$kernel-$dtype-$(date +%H%M%S)" "$secs" at search "$kernel" --gpu "$GPU" --dtype "$dtype" $shapes \
    "${timeout[@]}" "$@"
}

ship() {
  local kernel
  for kernel in "$@"; do
    if [ $(( BUDGET - ($(date +%s) - T0) )) -lt 15 ]; then  # $OUT/tuned.sqlite has the rows: ship them at home
      echo "SKIP ship $kernel (budget spent)" | tee -a /tmp/x/calls.log
      continue
    fi
    rm -f "/tmp/x/export-$kernel.sqlite"
    python3 -m autotune db export --gpu "$GPU" -o "/tmp/x/export-$kernel.sqlite" --kernel "$kernel" --db "$AUTOTUNE_DB" >> /tmp/x/ship.log 2>&1 \
      && python3 -m autotune db merge "/tmp/x/export-$kernel.sqlite" --db /tmp/x/shipped.sqlite >> /tmp/x/ship.log 2>&1
    echo "ship $kernel rc=$?" | tee -a /tmp/x/calls.log
  done
  keep
}

pack() {
  echo "call end $(( $(date +%s) - T0 ))s" | tee -a /tmp/x/calls.log
  tar czf "$OUT/r.tgz" -C /tmp x
  # The compiled binaries and their metadata only: a cached kernel loads from its .json and .cubin (Triton's
  # get_group keeps the files present), and the intermediate IR (.ttir .ttgir .llir .ptx .source) made the whole
  # cache too big to bring back (over the device tool's 64 MiB).
  [ -d "$TRITON_CACHE_DIR" ] && tar czf "$OUT/triton-cache.tgz" -C "$TRITON_CACHE_DIR" \
    --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' --exclude='*.source' .
}
