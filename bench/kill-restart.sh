#!/bin/sh
# kill-restart.sh BIN [RUNS]: how long a job waits, after its worker is
# SIGKILLed, before its next attempt starts, and how many of its first
# attempt's processes survive. The job's first attempt starts a chain of
# three levels of children (sh -> sh -> sh -> sleep) and waits; a second
# worker is ready to claim it. For each run the script prints the time
# from the SIGKILL to the second attempt's start and the number of the
# first attempt's processes still running at that moment, then the median.
# The kill falls at a random point of the second worker's periodic scan for
# dead workers (every 250 ms by default), which is most of the wait.
set -eu
bin=$1
runs=${2:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s%N; }

job='
if [ "$JOBDIR_ATTEMPT" = 1 ]; then
	sh -c '\''echo $$ >> pids; sh -c "echo \$\$ >> pids; sh -c \"echo \\\$\\\$ >> pids; exec sleep 300\" & wait" & wait'\'' &
	while [ "$(wc -l < pids 2>/dev/null)" != 3 ]; do sleep 0.01; done
	touch ready
	wait
else
	date +%s%N > started.tmp
	n=0
	for p in $(cat pids); do if kill -0 "$p" 2>/dev/null; then n=$((n+1)); fi; done
	echo "$n" > survivors
	mv started.tmp started
fi'

i=0
times=""
while [ "$i" -lt "$runs" ]; do
	i=$((i+1))
	d=$work/run$i
	mkdir -p "$d/wd"
	cd "$d/wd"
	"$bin" --dir "$d/store" work --concurrency 1 -q 2>"$d/first.err" &
	first=$!
	"$bin" --dir "$d/store" submit -- sh -c "$job" >/dev/null
	while [ ! -e ready ]; do sleep 0.01; done
	"$bin" --dir "$d/store" work --concurrency 1 -q 2>"$d/second.err" &
	second=$!
	# A random pause, so that the SIGKILL falls anywhere in the period of
	# the second worker's dead-worker scan (filestore's RecoverInterval).
	sleep "$(awk -v s="$(now)" 'BEGIN { srand(s % 1000003); printf "%.3f", 1 + rand() * 0.5 }')"
	killed=$(now)
	kill -9 "$first"
	while [ ! -e started ]; do sleep 0.005; done
	started=$(cat started)
	ms=$(( (started - killed) / 1000000 ))
	echo "run $i: next attempt started ${ms} ms after the SIGKILL; $(cat survivors) of 3 children of the first attempt still running"
	times="$times $ms"
	kill -TERM "$second"
	wait "$second" 2>/dev/null || true
	wait "$first" 2>/dev/null || true
	for p in $(cat pids); do kill -9 "$p" 2>/dev/null || true; done
	cd "$work"
done
median=$(echo $times | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median over $runs runs: ${median} ms"
