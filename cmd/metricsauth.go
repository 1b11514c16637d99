package main

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long the API server's answers about a scrape are reused, as
// controller-runtime's filter does: an authenticated token 1 minute, an
// allowed user 5 minutes, a denied one 30 seconds. At most reviewCacheSize
// answers of each kind are kept, so tokens sent by a hostile client cost
// bounded memory (each costs one TokenReview, as it would uncached).
const (
	tokenTTL        = time.Minute
	allowTTL        = 5 * time.Minute
	denyTTL         = 30 * time.Second
	reviewTimeout   = 10 * time.Second
	reviewCacheSize = 1024
)

// metricsAuth is the filter of the secure metrics server: each scrape must
// carry a bearer token the API server authenticates (TokenReview), for a
// user it allows to get the request's path (SubjectAccessReview on the
// non-resource URL, e.g. the metrics-reader ClusterRole's get on /metrics).
// It is what controller-runtime's filters.WithAuthenticationAndAuthorization
// checks, written against client-go alone: that filter links k8s.io/apiserver
// (and through it cel-go, antlr, gRPC and OpenTelemetry) into the binary.
func metricsAuth(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	r := &reviewer{
		authenticate: func(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
			tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
				&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			if err != nil || !tr.Status.Authenticated {
				return nil, err
			}
			return &tr.Status.User, nil
		},
		authorize: func(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			return sar.Status.Allowed && !sar.Status.Denied, nil
		},
		users:   newTTLCache[*authenticationv1.UserInfo](),
		allowed: newTTLCache[bool](),
		now:     time.Now,
	}
	return r.filter, nil
}

// reviewer asks the API server who a scrape comes from and whether it may.
type reviewer struct {
	// authenticate returns the token's user, nil when the token is not valid.
	authenticate func(ctx context.Context, token string) (*authenticationv1.UserInfo, error)
	authorize    func(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error)
	users        *ttlCache[*authenticationv1.UserInfo]
	allowed      *ttlCache[bool]
	now          func() time.Time
}

func (r *reviewer) filter(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
		defer cancel()
		user, err := r.user(ctx, req)
		if err != nil {
			log.Error(err, "authenticating a scrape")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		ok, err := r.may(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			log.Error(err, "authorizing a scrape", "user", user.Username)
			http.Error(w, "Authorization for user "+user.Username+" failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			log.V(4).Info("scrape denied", "user", user.Username, "path", req.URL.Path)
			http.Error(w, "Authorization denied for user "+user.Username, http.StatusForbidden)
			return
		}
		req.Header.Del("Authorization") // the token goes no further
		next.ServeHTTP(w, req)
	}), nil
}

// user authenticates req's bearer token; nil without a valid one.
func (r *reviewer) user(ctx context.Context, req *http.Request) (*authenticationv1.UserInfo, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(token)) // the cache keeps no token
	key := string(sum[:])
	if u, ok := r.users.get(key, r.now()); ok {
		return u, nil
	}
	u, err := r.authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	r.users.put(key, u, r.now(), tokenTTL)
	return u, nil
}

// may asks whether user may verb path.
func (r *reviewer) may(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	key := strings.Join([]string{user.Username, user.UID, strings.Join(user.Groups, ","), verb, path}, "\x00")
	if ok, found := r.allowed.get(key, r.now()); found {
		return ok, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	ok, err := r.authorize(ctx, authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	})
	if err != nil {
		return false, err
	}
	ttl := denyTTL
	if ok {
		ttl = allowTTL
	}
	r.allowed.put(key, ok, r.now(), ttl)
	return ok, nil
}

// ttlCache keeps at most reviewCacheSize values, each until its expiry.
type ttlCache[V any] struct {
	mu      sync.Mutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLCache[V any]() *ttlCache[V] { return &ttlCache[V]{entries: map[string]ttlEntry[V]{}} }

func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

// put keeps v for ttl from now; when full, the expired entries go first, and
// all of them if none has expired.
func (c *ttlCache[V]) put(key string, v V, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= reviewCacheSize {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= reviewCacheSize {
			clear(c.entries)
		}
	}
	c.entries[key] = ttlEntry[V]{value: v, expires: now.Add(ttl)}
}
