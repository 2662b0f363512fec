#!/usr/bin/env bash
# The validator must refuse manifests that would deploy a broken outboxd: each mutation below is
# applied to a copy of deploy/kubernetes, and validate.mjs must fail on it naming the problem.
#   mutations.sh <deploy/kubernetes> <repository> <outboxd binary>
set -euo pipefail
manifests=$1 repo=$2 binary=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
mutate() { # mutate "sed expression" "what validate.mjs must say"
  rm -rf "$work/k8s" && cp -r "$manifests" "$work/k8s"
  sed -i "$1" "$work/k8s"/*.yaml
  if out=$(node "$here/validate.mjs" "$work/k8s" "$repo" "$binary" 2>&1); then
    echo "FAIL: accepted after $1"; failures=$((failures + 1))
  elif ! grep -qF "$2" <<<"$out"; then
    echo "FAIL: after $1, expected \"$2\" in: $out"; failures=$((failures + 1))
  else
    echo "ok: $1 -> $2"
  fi
}
mutate 's/readinessProbe: #/readinesProbe: #/' 'unknown field "readinesProbe"'
mutate 's/containerPort: 9000/containerPort: 9001/' 'outboxd listens on 9000'
mutate 's|path: /readyz|path: /ready|' 'path /ready is no route of outboxd'
mutate 's|livenessProbe: # the process answers; never the database.s state|livenessProbe:|; /livenessProbe:$/{n;s|/healthz|/readyz|}' 'liveness must be /healthz'
mutate 's/terminationGracePeriodSeconds: 30/terminationGracePeriodSeconds: 15/' 'terminationGracePeriodSeconds 15'
mutate 's/args: \["serve"/args: ["server"/' '"server" is no outboxd command'
mutate 's|mountPath: /etc/outboxd/config$|mountPath: /etc/outboxd/conf|' 'is not a file of the mounted ConfigMap'
mutate 's/"poolSize": 3/"poolSize": "three"/' 'outbox.poolSize must be an integer'
mutate 's/"enabled": false/"enabled": true/' 'replicas must share one simulator'
mutate 's/OUTBOXD_AUTH_ALLOWANONYMOUS/OUTBOXD_AUTH_ALLOW_ANONYMOUS/' 'OUTBOXD_AUTH_ALLOW_ANONYMOUS is no variable outboxd reads'
mutate 's/REPLACE-ME-with-the-sha256-of-your-token/'"$(printf 'a%.0s' {1..64})"'/' 'the placeholder token must be refused'
mutate 's/failureThreshold: 30/failureThreshold: "30"/' 'failureThreshold must be integer'
mutate 's/targetPort: http/targetPort: web/' 'targetPort web is no container port'
mutate '/- simulator.yaml/d' 'resources'
((failures == 0)) || { echo "$failures mutation(s) not caught"; exit 1; }
