//go:build linux

package localsandbox

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// scanMarked returns the processes, other than this one, whose environment
// sets MarkerEnv to a value that match accepts. It reads
// /proc/<pid>/environ only of processes of this user (the owner of
// /proc/<pid>): the others' are unreadable to us anyway, and we could not
// kill them. A process that is gone by the time it is read, or a zombie
// (its environment reads empty), is left out. /proc/<pid>/environ holds
// the environment the process was started with, as it keeps it: a process
// that cleared it (env -i) or overwrote it is not found.
func scanMarked(match func(string) bool) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self, uid := os.Getpid(), uint32(os.Geteuid())
	key := []byte(MarkerEnv + "=")
	var found []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+name, &st) != nil || st.Uid != uid {
			continue
		}
		environ, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil || !bytes.Contains(environ, key) {
			continue
		}
		if markedIn(environ, match) {
			found = append(found, pid)
		}
	}
	return found
}
