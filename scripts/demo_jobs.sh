#!/usr/bin/env bash
# `make run`'s simulated jobs: FAIRLANE_DEMO_JOBS lanes, each launching one job after
# another through `fairlane run` (docs/launcher.md): `python -m fairlane.demo`, whose ranks
# run at their simulated GPU's hidden speed (the agent's --hidden-speeds-file) and report
# their progress, so the scorer learns which GPUs are slow under the job's class.
# FAIRLANE_DEMO_SHARE_JOBS more lanes run fractional jobs, each a share of one GPU
# (`--gpus 1 --gpu-share`, docs/fractional.md): the scheduler packs them onto GPUs other
# shares already use, so the dashboard shows GPUs shared by several jobs.
# SIGTERM/SIGINT stop the launchers, which release their placements.
#
# Env: FAIRLANE_SCHEDULER_URL, FAIRLANE_TOKEN(_FILE), KAFKA_BOOTSTRAP_SERVERS (the
#      launcher's), FAIRLANE_DEMO_SPEEDS (the hidden speeds file), FAIRLANE_DEMO_JOBS (3
#      lanes), FAIRLANE_DEMO_GPUS (4 per job), FAIRLANE_DEMO_STEPS (2400: about two
#      minutes at speed 1), FAIRLANE_DEMO_CLASS (compute-bound), FAIRLANE_DEMO_SHARE_JOBS
#      (2 fractional lanes, 0: none), FAIRLANE_DEMO_SHARE (0.3 of a GPU each).
set -uo pipefail

BIN=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin
LANES=${FAIRLANE_DEMO_JOBS:-3}
SHARE_LANES=${FAIRLANE_DEMO_SHARE_JOBS:-2}
stopping=0
launchers=()

# Lanes 0 .. LANES-1 run whole-GPU jobs, the SHARE_LANES after them a share of one GPU.
launch() {
  local size=(--gpus "${FAIRLANE_DEMO_GPUS:-4}")
  (($1 >= LANES)) && size=(--gpus 1 --gpu-share "${FAIRLANE_DEMO_SHARE:-0.3}")
  "$BIN/fairlane" run "${size[@]}" --class "${FAIRLANE_DEMO_CLASS:-compute-bound}" \
    --window-s 10 --master-addr 127.0.0.1 -- \
    "$BIN/python" -m fairlane.demo --steps "${FAIRLANE_DEMO_STEPS:-2400}" &
  launchers[$1]=$!
}

trap 'stopping=1' TERM INT
while ((stopping == 0)); do
  for ((lane = 0; lane < LANES + SHARE_LANES; lane++)); do
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
