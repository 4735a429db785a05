#!/usr/bin/env bash
# Multi-node for real on one host: two network namespaces ("machines") joined
# by a veth pair, one node of `gputrain run --nnodes 2` in each, talking over
# that link (Gloo bound to the veth interface). The run must match the same
# world on one node. Exits 77 (ctest: skipped), saying so, where namespaces
# cannot be created (not root, no iproute2, no CAP_NET_ADMIN in a container).
#
# usage: multinode_netns.sh GPUTRAIN_BINARY SHARED_DATA_DIR PYTHON
set -euo pipefail
gputrain=$1 data=$2 python=$3

probe=gtp$$
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root, iproute2 and CAP_NET_ADMIN); the two-node test did not run"
  exit 77
fi
ip netns del "$probe"

a=gtA$$ b=gtB$$ va=vA$$ vb=vB$$
work=$(mktemp -d)
cleanup() {
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$a"
ip netns add "$b"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"
ip link set "$vb" netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev "$va"
ip -n "$b" addr add 10.77.0.2/24 dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up
ip -n "$b" link set "$vb" up

cat > "$work/r.yaml" <<YAML
run: {name: two-nodes, threads: 1}
model: {vocab_size: 256, seq_len: 32, n_layer: 2, n_head: 2, d_model: 32, dropout: 0.0}
data:
  train: {format: text, path: $data/tinyshakespeare.txt, span: [0.0, 0.01]}
train: {per_device_batch_size: 2, max_steps: 15, log_every: 1}
optim: {lr: 3e-3, schedule: {warmup_steps: 2}}
metrics: {progress: off}
YAML

echo "== one node, 2 processes"
"$gputrain" run "$work/r.yaml" --nproc-per-node 2 --output-dir "$work/one" > "$work/one.log" 2>&1 || {
  cat "$work/one.log"; exit 1; }

echo "== two nodes (namespaces $a and $b over 10.77.0.0/24), 1 process each"
common=(run "$work/r.yaml" --nnodes 2 --nproc-per-node 1 --master-addr 10.77.0.1 --master-port 29555
        --output-dir "$work/two" --set parallel.timeout_s=60)
GLOO_SOCKET_IFNAME=$va ip netns exec "$a" "$gputrain" "${common[@]}" --node-rank 0 > "$work/node0.log" 2>&1 &
node0=$!
GLOO_SOCKET_IFNAME=$vb ip netns exec "$b" "$gputrain" "${common[@]}" --node-rank 1 > "$work/node1.log" 2>&1 &
node1=$!
rc0=0 rc1=0
wait "$node0" || rc0=$?
wait "$node1" || rc1=$?
sed 's/^/node0: /' "$work/node0.log" | grep -v " info " || true
sed 's/^/node1: /' "$work/node1.log" | grep -v " info " || true
grep -h "parallel:" "$work/node0.log" || true
if [[ $rc0 != 0 || $rc1 != 0 ]]; then
  echo "FAILED: node exit codes $rc0 and $rc1"
  cat "$work/node0.log" "$work/node1.log"
  exit 1
fi

"$python" - "$work/one/metrics.jsonl" "$work/two/metrics.jsonl" <<'PY'
import json, sys
one = [json.loads(l)["loss"] for l in open(sys.argv[1])]
two = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(one) == len(two) == 15, (len(one), len(two))
diff = max(abs(a - b) for a, b in zip(one, two))
print(f"max per-step loss difference, two nodes vs one node: {diff:.2e} (tolerance 1e-5)")
assert diff < 1e-5
assert one[-1] < one[0] - 0.5
print("PASSED")
PY
