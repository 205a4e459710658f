// Package helm holds the tests of agentbot's Helm chart, helm/agentbot.
// They run the helm CLI (from PATH, else the repository's .bin) and fail
// when it is missing: lint, render with the values files of testdata/,
// decode every rendered object strictly into its Kubernetes API type,
// check the pods' security and probes, and load each process's rendered
// environment with internal/config as the binaries do at start.
package helm
