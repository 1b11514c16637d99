package main

import (
	"context"
	"errors"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A busy API server past its request timeout resets the stream of a CREATE
// (CI, stop 50: "stream error: stream ID 1073; INTERNAL_ERROR; received from
// peer"); the bench retries that, and nothing the server answered.
func TestTransportError(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"reset stream", &url.Error{Op: "Post", URL: "https://127.0.0.1/apis", Err: errors.New("stream error: stream ID 1073; INTERNAL_ERROR; received from peer")}, true},
		{"an answer: invalid", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "a", nil), false},
		{"an answer: forbidden", apierrors.NewForbidden(gr, "a", errors.New("no")), false},
		{"the bench's own deadline", &url.Error{Op: "Post", URL: "https://127.0.0.1/apis", Err: context.DeadlineExceeded}, false},
		{"canceled", context.Canceled, false},
	} {
		if got := transportError(tc.err); got != tc.want {
			t.Errorf("%s: transportError = %v, want %v", tc.name, got, tc.want)
		}
	}
}
