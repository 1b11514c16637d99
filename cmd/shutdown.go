package main

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// stopContext returns the manager's context: it ends delay after the first
// SIGTERM or SIGINT, and begin runs at the signal (the webhook's drain). In
// between, the replica serves as before while the API servers and kube-proxy
// drop its endpoint. A second signal exits at once (controller-runtime's
// handler).
func stopContext(delay time.Duration, begin func(), log logr.Logger) context.Context {
	signalled := ctrl.SetupSignalHandler()
	if delay <= 0 {
		return signalled
	}
	ctx, stop := context.WithCancel(context.WithoutCancel(signalled))
	go func() {
		<-signalled.Done()
		begin()
		log.Info("stopping: still serving, every admission's connection closed after its answer", "for", delay.String())
		time.Sleep(delay)
		stop()
	}()
	return ctx
}
