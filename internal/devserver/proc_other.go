//go:build !unix

package devserver

import "os/exec"

// setProcessGroup is a no-op where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// terminateGroup kills the server: without Unix signals there is no graceful
// request to send.
func terminateGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

// killGroup kills the server process.
func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
