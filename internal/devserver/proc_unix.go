//go:build unix

package devserver

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts the server as the leader of a new process group, so
// signals reach anything it spawns and a Ctrl-C in the parent's terminal does
// not hit it before the parent can stop it in order.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminateGroup asks the server's process group to shut down.
func terminateGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
}

// killGroup kills whatever is left of the server's process group. ESRCH (the
// group is already gone) is the common, expected case.
func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
