// Package sandboxbench benchmarks the sandbox layer (package sandboxes and
// its local and Docker backends) against the plain tools underneath, in one
// run, so the numbers can be compared. The package has no code of its own:
// everything is in its tests.
//
// # Running
//
// All of them, the way the numbers in reviews are taken (a few minutes on
// two cores; the first run also generates the workspace tree, below):
//
//	go test -run '^$' -bench . -benchtime=3x ./sandboxes/sandboxbench/
//
// A smoke test, for CI: a 20 MB tree, one iteration each:
//
//	go test -run '^$' -bench . -benchtime=1x -short ./sandboxes/sandboxbench/
//
// One group, or one backend: -bench 'Snapshot/local'. Where the time goes:
// add -cpuprofile cpu.out and read it with go tool pprof. Without -bench,
// go test runs TestBenchTreeDeterministic only, which checks the tree
// generator.
//
// The Docker sub-benchmarks need the Docker engine and the test image
// (scripts/setup.sh --test builds it; AGENTBOT_TEST_IMAGE names another
// image), the baselines need tar, zstd and the docker CLI: without them a
// benchmark fails, it does not skip. Containers carry the label
// agentbot-sandboxbench and are removed at the end of their benchmark; a
// run killed midway leaves them behind, for
//
//	docker rm -f $(docker ps -aq --filter label=agentbot-sandboxbench)
//
// # What is measured
//
// BenchmarkExec runs `true` through Sandbox.Exec on each backend (exec
// overhead: spawning, pipes, output capture, and for Docker the API round
// trips), next to the tools underneath: os/exec of `sh -c true`
// (sh-c-true) and `docker exec <container> sh -c true` through the CLI
// against a container of the test image (docker-exec-cli).
//
// BenchmarkSnapshot writes Sandbox.Snapshot of a generated workspace tree
// to a writer that counts and drops it, next to `tar -C dir -cf - . | zstd
// -1 -T0` (tar-zstd-1). The Docker sandbox gets the tree once, by a
// Restore, before timing starts.
//
// BenchmarkRestore restores a snapshot of that tree, read from a file,
// with Sandbox.Restore into a fresh sandbox, next to `zstd -d -c snapshot |
// tar -C fresh -xf -` (zstd-tar) into a fresh directory. Creating the
// sandbox or directory, checking that the whole tree landed and deleting it
// again are not timed.
//
// Every snapshot and restore is checked to have carried the whole tree
// (files, directories, bytes): a benchmark that silently did less fails.
//
// # The workspace tree
//
// The tree is 200 MB of file contents (20 MB with -short;
// AGENTBOT_BENCH_MB=n chooses n MB, n times 10^6 bytes): half in small
// files of 1–8 KiB (about 21,700 at 200 MB) in directories nested up to
// four deep, a mix of source-like text, JSON, shell scripts, random bytes
// and half-random data; half in three large files, a random blob, a
// repetitive log and a file alternating random and repeated chunks. It
// compresses about 1.7x. It is generated from a fixed seed, so it is the
// same on every machine and run, and kept under
// $TMPDIR/agentbot-sandboxbench/ (a size of its own per tree) so later
// runs reuse it; a tree that lost files is made again. Delete the directory
// to get the space back.
//
// The tree and the snapshot are read from the page cache, and restores
// write into it: these benchmarks measure CPU and file system work, not the
// disk. On file systems where creating a file is slow, that cost, the same
// for both sides, dominates restores of many small files: TMPDIR chooses
// where the local backend and the baselines work. That cost also varies
// with what the file system was doing before (on an ext4 mounted with
// discard, by a factor of two from one run to the next): restores sync the
// file systems off the clock before each iteration, so one does not pay
// for deleting the tree of the one before, and -count=2 shows how far
// apart runs still are. The CPU metrics below move much less.
//
// # Reading the results
//
// Besides ns/op (and MB/s, of uncompressed file contents, for snapshots and
// restores), the benchmarks report:
//
//   - x-<baseline>: time per operation over the baseline's, from the same
//     run (2 means twice as slow). Missing when -bench filtered the
//     baseline out: the baseline runs first, as the sub-benchmark before.
//   - ratio: bytes of file contents over bytes of snapshot; the baselines
//     report their own output's, or the snapshot file's they read.
//   - x-size-tar-zstd-1: the size of our snapshot over the baseline's
//     output, from the same run (1.05 means 5% larger).
//   - cpu-s/op: CPU time (user and system) per operation: of this process
//     for our code (whatever else it runs meanwhile, which is little), of
//     the pipeline's commands for the baselines. On a machine shared with
//     other work, time per operation goes with the share of the cores each
//     side gets; CPU time much less.
//   - daemon-cpu-s/op (Docker): the Docker daemon's CPU time per
//     operation, with the docker-tar and docker-untar processes it runs
//     for the copy API, where /proc shows it (a daemon on this host). It
//     counts whatever else the daemon does meanwhile.
//   - peak-heap-MB (our code): the highest Go heap (live and unswept
//     objects) sampled every 10ms during the benchmark, after a GC at its
//     start. It does not grow with the tree: Snapshot and Restore stream.
//     For Docker, the daemon's own memory is not counted.
//   - peak-rss-MB: for our code, the peak resident set of the whole test
//     process (runtime, binary, heap), reset at the start of the benchmark
//     (Linux only); for the baselines, the sum of the peaks of the
//     commands of the pipeline, sampled from /proc every 10ms.
//
// MB is 10^6 bytes throughout, as in go test's MB/s. With -benchtime=3x
// every number is an average of three runs: compare numbers of the same
// run, on a machine that is otherwise idle, and use -count with benchstat
// for anything finer.
package sandboxbench
