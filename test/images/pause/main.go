// Command pause is the pod sandbox ("pause") image of the local node tests,
// tagged registry.k8s.io/pause:3.10 by hack/images. Like upstream's pause it
// only holds the pod's namespaces open: it blocks until SIGINT or SIGTERM and
// then exits 0. Unlike upstream it does not reap zombies (the tests do not
// share the pod's PID namespace).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of its namespace the process gets no default signal
	// handling, so SIGTERM must be handled explicitly to stop at all.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	os.Exit(0)
}
