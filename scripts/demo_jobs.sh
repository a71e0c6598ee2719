#!/usr/bin/env bash
# `make run`'s simulated jobs: FAIRLANE_DEMO_JOBS lanes, each launching one job after
# another through `fairlane run` (docs/launcher.md): `python -m fairlane.demo`, whose ranks
# run at their simulated GPU's hidden speed (the agent's --hidden-speeds-file) and report
# their progress, so the scorer learns which GPUs are slow under the job's class.
# SIGTERM/SIGINT stop the launchers, which release their placements.
#
# Env: FAIRLANE_SCHEDULER_URL, FAIRLANE_TOKEN(_FILE), KAFKA_BOOTSTRAP_SERVERS (the
#      launcher's), FAIRLANE_DEMO_SPEEDS (the hidden speeds file), FAIRLANE_DEMO_JOBS (3
#      lanes), FAIRLANE_DEMO_GPUS (4 per job), FAIRLANE_DEMO_STEPS (2400: about two
#      minutes at speed 1), FAIRLANE_DEMO_CLASS (compute-bound).
set -uo pipefail

BIN=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin
LANES=${FAIRLANE_DEMO_JOBS:-3}
stopping=0
launchers=()

launch() {
  "$BIN/fairlane" run --gpus "${FAIRLANE_DEMO_GPUS:-4}" --class "${FAIRLANE_DEMO_CLASS:-compute-bound}" \
    --window-s 10 --master-addr 127.0.0.1 -- \
    "$BIN/python" -m fairlane.demo --steps "${FAIRLANE_DEMO_STEPS:-2400}" &
  launchers[$1]=$!
}

trap 'stopping=1' TERM INT
while ((stopping == 0)); do
  for ((lane = 0; lane < LANES; lane++)); do
    pid=${launchers[lane]:-}
    if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
      [[ -n $pid ]] && { wait "$pid"; echo "demo_jobs.sh: lane $lane: job ended ($?)"; }
      launch "$lane"
    fi
  done
  sleep 5 & wait $! # a signal interrupts the wait, not only the next loop
done
kill -TERM "${launchers[@]}" 2>/dev/null
wait
echo "demo_jobs.sh: stopped"
