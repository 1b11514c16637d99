package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// The metrics filter lets a scrape through only with a token the API server
// authenticates, for a user it allows to get the path; it reuses answers for
// their time and keeps a bounded number of them.
func TestMetricsAuth(t *testing.T) {
	now := time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC)
	var reviews, accesses int
	var apiDown bool
	r := &reviewer{
		authenticate: func(_ context.Context, token string) (*authenticationv1.UserInfo, error) {
			reviews++
			if apiDown {
				return nil, errors.New("connection refused")
			}
			switch token {
			case "prometheus":
				return &authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"}}, nil
			case "tenant":
				return &authenticationv1.UserInfo{Username: "system:serviceaccount:team-a:default"}, nil
			}
			return nil, nil
		},
		authorize: func(_ context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
			accesses++
			if spec.NonResourceAttributes == nil || spec.ResourceAttributes != nil {
				return false, fmt.Errorf("not a non-resource review: %+v", spec)
			}
			return spec.User == "system:serviceaccount:monitoring:prometheus" && spec.NonResourceAttributes.Verb == "get" &&
				spec.NonResourceAttributes.Path == "/metrics", nil
		},
		users: newTTLCache[*authenticationv1.UserInfo](), allowed: newTTLCache[bool](), now: func() time.Time { return now },
	}
	var sawToken string
	h, err := r.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sawToken = req.Header.Get("Authorization")
		_, _ = w.Write([]byte("metrics"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(auth string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	steps := []struct {
		name              string
		auth              string
		before            func()
		code              int
		reviews, accesses int // API calls so far
	}{
		{"no token", "", nil, http.StatusUnauthorized, 0, 0},
		{"not a bearer token", "Basic cHJvbTpwYXNz", nil, http.StatusUnauthorized, 0, 0},
		{"empty bearer token", "Bearer ", nil, http.StatusUnauthorized, 0, 0},
		{"a token the API server does not know", "Bearer forged", nil, http.StatusUnauthorized, 1, 0},
		{"a tenant's token", "Bearer tenant", nil, http.StatusForbidden, 2, 1},
		{"Prometheus", "Bearer prometheus", nil, http.StatusOK, 3, 2},
		{"Prometheus again: both answers reused", "bearer prometheus", nil, http.StatusOK, 3, 2},
		{"a minute later: the token is reviewed again", "Bearer prometheus", func() { now = now.Add(tokenTTL) }, http.StatusOK, 4, 2},
		{"the tenant again a minute later: its denial (30 s) expired too", "Bearer tenant", nil, http.StatusForbidden, 5, 3},
		{"the tenant within 30 s: both answers reused", "Bearer tenant", func() { now = now.Add(20 * time.Second) }, http.StatusForbidden, 5, 3},
		{"API server down, answers expired", "Bearer prometheus", func() { now = now.Add(allowTTL); apiDown = true }, http.StatusInternalServerError, 6, 3},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		if code := scrape(s.auth); code != s.code {
			t.Errorf("%s: status %d, want %d", s.name, code, s.code)
		}
		if reviews != s.reviews || accesses != s.accesses {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", s.name, reviews, accesses, s.reviews, s.accesses)
		}
	}
	if sawToken != "" {
		t.Errorf("the metrics handler saw the Authorization header %q", sawToken)
	}
	// 10,000 forged tokens: the cache stays bounded.
	apiDown = false
	for i := range 10000 {
		scrape(fmt.Sprintf("Bearer forged-%d", i))
	}
	if n := len(r.users.entries); n > reviewCacheSize {
		t.Errorf("%d cached token answers after 10,000 forged tokens, want at most %d", n, reviewCacheSize)
	}
}
