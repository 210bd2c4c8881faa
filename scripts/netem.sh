#!/usr/bin/env bash
# An emulated cluster network on this machine, for measuring collectives the way the
# papers did on real Ethernet: WORKERS network namespaces (gx0 … gxN-1), each a "host"
# with one veth link to a bridge that lives in its own hub namespace (gxhub), so nothing
# touches this machine's own network. Every link is shaped to RATE (default 1gbit) in
# both directions with a token bucket (tbf), with optional DELAY (netem). One worker of COMMAND runs per
# namespace with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GRADEX_TOKEN and
# GRADEX_BIND_ADDR set; everything is torn down on exit, also on Ctrl-C or failure.
#
#   scripts/netem.sh --workers 8 [--rate 1gbit] [--shaper tbf|htb] [--burst 256kb] [--delay 0.1ms] [--gso-segs N] [--ack-prio] [--pin] -- target/release/comm_bench --sizes 1048576
#
# --burst is the token bucket's depth: a message that fits in it after an idle moment
# leaves at the veth's speed, not RATE (a real NIC has no such allowance), so sparse
# collectives' small messages can beat an alpha-beta model fitted on large ones. tbf did
# not hold 1 Gbit/s with smaller buckets on the 6.18 kernel we measured (64kb: 0.70
# Gbit/s); --shaper htb --burst 16kb did (0.95), and is the truer NIC. tbf with 256kb
# stays the default so that earlier tables remain comparable.
#
# --gso-segs N caps the veths' segmentation offload at N MTU-sized packets (default: the
# kernel's 64 kB super-packets). The shaper releases a whole super-packet once its bucket
# is not empty, so with the default a message up to about 64 kB plus the burst can leave
# at once after an idle moment; N=1 is a NIC's packet-at-a-time wire, but costs a kernel
# pass per 1.5 kB packet, which 2 cores cannot do for 8 hosts at 1 Gbit/s (RESULTS.md).
# Between the two, N=22 (32 kB) kept gTopK's 33 kB messages at 16 MiB within 10 % of the
# model with 4 and 8 hosts on 2 cores (0.44-0.60x uncapped) and the dense ring within 6 %.
#
# --ack-prio (htb only) sends TCP packets under 128 bytes (pure ACKs, the frames of a
# barrier) ahead of bulk data on every shaped link, as a default Linux host's fq_codel
# does for sparse flows (this kernel has no fq_codel). Without it, the ACKs of the data a
# host receives wait behind the data it sends (up to 0.3 MB were queued in a 4-worker run:
# 25 ms at 100 Mbit/s), and a ring allreduce, which sends and receives at once, ran
# 1.16-1.25x the alpha-beta model at 100 Mbit/s against 1.00x with it (RESULTS.md). The model
# assumes the two directions of a link do not interfere; with --ack-prio they do not.
#
# --delay D adds D of one-way delay between any two hosts (netem on each host's upload;
# a round trip is 2D). It needs the kernel's sch_netem, checked before anything is set up.
#
# --pin runs worker i on CPU i × (cores / workers) (taskset): with at least as many
# cores as workers no two share a core, and the cores between them are left to the
# kernel's network work; without it the scheduler places and moves them.
#
# Needs root (network namespaces) and iproute2. Traffic stays inside the namespaces.
set -euo pipefail

workers=8 rate=1gbit burst=256kb shaper=tbf delay="" gso_segs="" ack_prio=0 pin=0 subnet=10.213.7 port=29500
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --shaper) shaper=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --gso-segs) gso_segs=$2; shift 2 ;;
    --) shift; break ;;
    --ack-prio) ack_prio=1; shift ;;
    --pin) pin=1; shift ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "netem.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netem.sh: give the command to run after --" >&2; exit 2; }
case "$shaper" in tbf|htb) ;; *) echo "netem.sh: --shaper must be tbf or htb" >&2; exit 2 ;; esac
case "$gso_segs" in ""|[1-9]|[1-9][0-9]) ;; *) echo "netem.sh: --gso-segs must be 1..99" >&2; exit 2 ;; esac
[ "$pin" = 0 ] || command -v taskset >/dev/null || { echo "netem.sh: --pin needs taskset (util-linux)" >&2; exit 2; }
[ "$ack_prio" = 0 ] || [ "$shaper" = htb ] || { echo "netem.sh: --ack-prio needs --shaper htb" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netem.sh: needs root for network namespaces" >&2; exit 2; }
[ "$workers" -ge 1 ] && [ "$workers" -le 250 ] || { echo "netem.sh: --workers must be 1..250" >&2; exit 2; }

if [ "$ack_prio" = 1 ]; then
  command -v awk >/dev/null || { echo "netem.sh: --ack-prio needs awk" >&2; exit 2; }
  # The two classes' guaranteed rates: 1/20 of RATE for small packets (ACKs are ~4 % of
  # the reverse flow's bytes), the rest for bulk; both in bit/s, which tc takes as "bit".
  # The number is the longest leading decimal (with an optional exponent), the rest the unit.
  bits=$(awk -v r="$rate" 'BEGIN {
    if (!match(r, /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?/)) exit 1
    n = substr(r, 1, RLENGTH) + 0; u = tolower(substr(r, RLENGTH + 1))
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    if (!(u in m) || n * m[u] < 20000) exit 1
    printf "%.0f", n * m[u] }') \
    || { echo "netem.sh: --ack-prio needs --rate of at least 20kbit in bit, kbit, mbit, gbit or tbit (got $rate)" >&2; exit 2; }
  small_rate="$((bits / 20))bit" bulk_rate="$((bits - bits / 20))bit"
fi

pids=()
cleanup() {
  # Workers still running (Ctrl-C, a timeout) go first, then their namespaces.
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  for ((i = 0; i < workers; i++)); do ip netns del "gx$i" 2>/dev/null || true; done
  ip netns del gxhub 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup

shape() { # namespace device [delay]
  # Rate with a token bucket: tbf, or an htb class (which holds the rate with a shallower
  # bucket on the kernel we measured); the delay, where given, with netem above it (only
  # on a host's upload, so that the one-way delay between two hosts is --delay, not twice
  # it; not every kernel has sch_netem: that is checked before anything is set up). htb's quantum only splits
  # spare rate between sibling classes (there are none, or --ack-prio's two, which htb
  # serves by prio): it is set to keep tc from warning that rate/r2q is big.
  local parent=root
  if [ -n "${3:-}" ]; then
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$3" \
      || { echo "netem.sh: tc refused netem delay $3 on $2" >&2; exit 2; }
    parent="parent 1:"
  fi
  case "$shaper" in
    tbf) tc -n "$1" qdisc add dev "$2" $parent handle 2: tbf rate "$rate" burst "$burst" latency 50ms ;;
    htb)
      tc -n "$1" qdisc add dev "$2" $parent handle 2: htb default 10
      if [ "$ack_prio" = 0 ]; then
        tc -n "$1" class add dev "$2" parent 2: classid 2:10 htb rate "$rate" ceil "$rate" burst "$burst" cburst "$burst" quantum 200000
        return
      fi
      # Under one class at RATE: bulk (2:10) and small packets (2:20), which htb serves
      # first (prio 0). Each is guaranteed part of RATE and may borrow up to all of it from
      # the parent, which is charged for both: ACKs spend the link's tokens, and the sum
      # stays within RATE over time (each class has its own --burst bucket, so a moment's
      # burst can reach the two buckets together).
      tc -n "$1" class add dev "$2" parent 2: classid 2:1 htb rate "$rate" ceil "$rate" burst "$burst" cburst "$burst" quantum 200000
      tc -n "$1" class add dev "$2" parent 2:1 classid 2:10 htb rate "$bulk_rate" ceil "$rate" burst "$burst" cburst "$burst" quantum 200000 prio 1
      tc -n "$1" class add dev "$2" parent 2:1 classid 2:20 htb rate "$small_rate" ceil "$rate" burst "$burst" cburst "$burst" quantum 200000 prio 0
      # IPv4, protocol TCP, total length < 128 bytes (the top nine bits of the 16-bit field clear).
      tc -n "$1" filter add dev "$2" parent 2: protocol ip prio 1 u32 \
        match ip protocol 6 0xff match u16 0x0000 0xff80 at 2 flowid 2:20 \
        || { echo "netem.sh: --ack-prio needs the kernel's u32 classifier (cls_u32)" >&2; exit 2; } ;;
  esac
}

ip netns add gxhub
ip -n gxhub link set lo up
if [ -n "$delay" ]; then
  # Before any link exists: a kernel without sch_netem, or a delay tc cannot read, is
  # named here with tc's own message.
  if ! err=$(tc -n gxhub qdisc add dev lo root netem delay "$delay" 2>&1); then
    echo "netem.sh: --delay $delay: tc says: $err" >&2
    # (grep without -q reads to the end: with pipefail, -q's early exit would kill zcat
    # and fail the pipe exactly when the option is there.)
    if [ -r /proc/config.gz ] && ! zcat /proc/config.gz | grep '^CONFIG_NET_SCH_NETEM=' >/dev/null; then
      echo "netem.sh: this kernel has no netem qdisc (sch_netem), which --delay needs" >&2
    fi
    exit 2
  fi
  tc -n gxhub qdisc del dev lo root
fi
ip -n gxhub link add br0 type bridge
ip -n gxhub link set br0 up
for ((i = 0; i < workers; i++)); do
  ip netns add "gx$i"
  ip link add "veth$i" netns "gx$i" type veth peer name "port$i" netns gxhub
  ip -n "gx$i" link set lo up
  ip -n "gx$i" addr add "$subnet.$((i + 1))/24" dev "veth$i"
  ip -n "gx$i" link set "veth$i" up
  ip -n gxhub link set "port$i" master br0
  if [ -n "$gso_segs" ]; then
    ip -n "gx$i" link set "veth$i" gso_max_segs "$gso_segs"
    ip -n gxhub link set "port$i" gso_max_segs "$gso_segs"
  fi
  ip -n gxhub link set "port$i" up
  shape "gx$i" "veth$i" "$delay"   # the host's upload, and the one-way delay
  shape gxhub "port$i"             # its download
done

token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
cpus=$(nproc)
for ((i = 0; i < workers; i++)); do
  pinned=()
  if [ "$pin" = 1 ]; then
    stride=$((cpus / workers > 0 ? cpus / workers : 1))
    pinned=(taskset -c $(((i * stride) % cpus)))
  fi
  ip netns exec "gx$i" "${pinned[@]}" env RANK=$i WORLD_SIZE="$workers" MASTER_ADDR="$subnet.1" MASTER_PORT=$port \
    GRADEX_TOKEN="$token" GRADEX_BIND_ADDR="$subnet.$((i + 1))" "$@" &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "netem.sh: worker $i failed" >&2
    status=1
  fi
done
pids=() # all reaped: nothing for cleanup to kill
exit $status
