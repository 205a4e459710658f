//go:build !linux

package secretenv

// Hide returns environ unchanged: elsewhere than Linux there is no
// re-execution, and the environment block keeps the secrets the program
// was started with.
func Hide(environ, args, names []string) ([]string, error) { return environ, nil }

// SetNotDumpable does nothing elsewhere than Linux.
func SetNotDumpable() error { return nil }
