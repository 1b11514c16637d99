#!/usr/bin/env bash
# The demo: a local control plane, configstamp against it, the ConfigMap-restart
# tutorial applied, then a changed ConfigMap applied with kubectl and the rolling
# update shown step by step. `hack/demo.sh up` leaves everything running;
# `hack/demo.sh down` stops it. Run through `make demo` / `make demo-down`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO_DIR=${DEMO_DIR:-$ROOT/_output/demo}
BIN=${CONFIGSTAMP_BIN:-$ROOT/bin}
NS=test-space

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

# poll DESCRIPTION SECONDS COMMAND...: run COMMAND until it succeeds or time runs out.
poll() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then echo "timed out after ${secs}s waiting for: $what" >&2; return 1; fi
    sleep 0.5
  done
}

stop_configstamp() {
  if [[ -f $DEMO_DIR/configstamp.pid ]]; then
    local pid
    pid=$(cat "$DEMO_DIR/configstamp.pid")
    kill "$pid" 2>/dev/null || true
    # The next one binds the same ports: wait until this one is gone.
    poll "the previous configstamp to exit" 30 bash -c "! kill -0 $pid"
    rm -f "$DEMO_DIR/configstamp.pid"
  fi
}

down() {
  stop_configstamp
  if [[ -x $BIN/localcp ]]; then "$BIN/localcp" down --dir "$DEMO_DIR/cluster" || true; fi
  echo "demo stopped"
}

template_hash() {
  kubectl -n $NS get deploy frontend -o jsonpath='{.spec.template.metadata.annotations.configstamp\.io/config-hash}'
}

up() {
  mkdir -p "$DEMO_DIR"
  (cd "$ROOT" && go build -o "$BIN/localcp" ./hack/localcp)

  step "Starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)"
  eval "$("$BIN/localcp" up --dir "$DEMO_DIR/cluster" --full)"
  export KUBECONFIG
  run kubectl get nodes

  step "Starting configstamp against it (self-managed webhook certificate, webhook on 127.0.0.1:9443)"
  stop_configstamp
  kubectl create namespace configstamp-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  "$BIN/configstamp" --kubeconfig="$KUBECONFIG" --namespace=configstamp-system \
    --cert-mode=self --webhook-url=https://127.0.0.1:9443 --webhook-port=9443 \
    --health-probe-bind-address=127.0.0.1:8081 --metrics-bind-address=127.0.0.1:8080 \
    --shutdown-delay=0s \
    >"$DEMO_DIR/configstamp.log" 2>&1 &
  echo $! >"$DEMO_DIR/configstamp.pid"
  poll "configstamp /readyz" 60 curl -fsS http://127.0.0.1:8081/readyz
  echo "configstamp is ready (log: $DEMO_DIR/configstamp.log)"

  if kubectl get namespace $NS >/dev/null 2>&1; then
    step "Removing the previous run's $NS namespace"
    run kubectl delete namespace $NS --wait=true
  fi

  step "Applying the tutorial: the frontend-config ConfigMap and the frontend Deployment that mounts it at /config"
  run kubectl apply -f "$ROOT/hack/demo/tutorial/namespace.yaml"
  run kubectl apply -f "$ROOT/hack/demo/tutorial/"
  run kubectl -n $NS rollout status deployment/frontend --timeout=120s
  poll "the baseline record" 30 bash -c "kubectl -n $NS get deploy frontend -o jsonpath='{.metadata.annotations}' | grep -q applied-hash"
  run kubectl -n $NS get replicasets,pods -o wide
  echo "configstamp recorded a baseline and restarted nothing:"
  run kubectl -n $NS get deployment frontend -o jsonpath='{.metadata.annotations.configstamp\.io/applied-hash}{"\n"}'
  old_pod=$(kubectl -n $NS get pods -l app=frontend -o jsonpath='{.items[0].metadata.name}')

  step "Changing the message: kubectl apply of the changed ConfigMap"
  run kubectl apply -f "$ROOT/hack/demo/configmap-changed.yaml"
  poll "the new hash on the pod template" 30 bash -c "[[ -n \$(kubectl -n $NS get deploy frontend -o jsonpath='{.spec.template.metadata.annotations.configstamp\.io/config-hash}') ]]"
  echo "the pod template now carries: configstamp.io/config-hash=$(template_hash)"
  run kubectl -n $NS rollout status deployment/frontend --timeout=120s
  poll "the old pod to be replaced" 60 bash -c "! kubectl -n $NS get pod $old_pod"

  step "The rolling update: a new ReplicaSet, the old pod ($old_pod) replaced"
  run kubectl -n $NS get replicasets,pods -o wide
  run kubectl -n $NS get events --field-selector reason=ConfigChanged
  rs=$(kubectl -n $NS get replicasets -o name | wc -l)
  echo "ReplicaSets of frontend: $rs (one before the change, one after)"

  step "Asking configstamp why frontend rolled: kubectl configstamp (bin/kubectl-configstamp on PATH)"
  (cd "$ROOT" && go build -o "$BIN/kubectl-configstamp" ./cmd/kubectl-configstamp)
  poll "the rollout record to close" 60 bash -c "[[ \$(kubectl -n $NS get deploy frontend -o jsonpath='{.metadata.annotations.configstamp\\.io/rollout-state}') != rolling ]]"
  PATH="$BIN:$PATH" run kubectl configstamp -n $NS why deployment/frontend

  step "Done. The cluster and configstamp keep running:"
  echo "export KUBECONFIG=$KUBECONFIG"
  echo "stop everything with: make demo-down"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
