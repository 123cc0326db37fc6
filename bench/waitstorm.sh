#!/bin/sh
# waitstorm.sh BASE [ROUNDS]: BenchmarkWaitStorm of filestore (library
# Waits) and httpapi (HTTP long-polls), this work tree's benchmarks run
# on the code of commit BASE and on this work tree's, side by side in one
# run: ROUNDS rounds (default 3), each running
# BASE's benchmarks then this tree's, so that both meet the same load of
# the machine; then benchstat of the two. Each benchmark holds 5,000 waits
# on one running job and reports the delay of its Complete by a worker in
# another process (complete-ms),
# the slowest and median Get of that job (get-max-ms, get-p50-ms) and the
# time until every wait returned (wake-all-ms).
set -eu
base=$1
rounds=${2:-3}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/base"
git -C "$root" archive "$base" | tar -x -C "$work/base"
for f in filestore/waitstorm_bench_test.go httpapi/waitstorm_bench_test.go; do
	cp "$root/$f" "$work/base/$f"
done
run() {
	(cd "$1" && go test -run '^$' -bench '^BenchmarkWaitStorm$/' -benchtime 1x -count 1 ./filestore ./httpapi)
}
i=0
while [ "$i" -lt "$rounds" ]; do
	run "$work/base" >> "$work/before.txt"
	run "$root" >> "$work/after.txt"
	i=$((i + 1))
done
cd "$root"
go tool benchstat "before=$work/before.txt" "after=$work/after.txt"
