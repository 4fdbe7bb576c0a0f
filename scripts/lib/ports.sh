# Sourced by the test scripts: `free_port VAR` sets VAR to a loopback port for a server they
# start. (Not `$(free_port)`: a command substitution's subshell would drop the lock at once.)
#
# The same rule as crates/test-support/src/ports.rs, so scripts and tests running side by side
# never pick one port twice:
# - below the kernel's ephemeral range, where the local ports of outgoing connections land
#   (a port picked there can be taken by any client's connect() before the server binds it);
# - locked with flock on /tmp/chime-test-ports/<port>.lock, held by this shell (and the
#   servers it starts, which inherit the descriptor) until it exits.

chime_port_locks=${TMPDIR:-/tmp}/chime-test-ports

# Its locals are prefixed: `printf -v` would otherwise set a local of the same name as VAR.
free_port() {
    local _fp_var=$1 _fp_low=10000 _fp_high _fp_span _fp_start _fp_port _fp_fd _fp_i
    _fp_high=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    _fp_span=$((_fp_high - _fp_low))
    mkdir -p "$chime_port_locks"
    _fp_start=$(((RANDOM * 32768 + RANDOM) % _fp_span))
    for ((_fp_i = 0; _fp_i < 200; _fp_i++)); do
        _fp_port=$((_fp_low + (_fp_start + _fp_i * 7919) % _fp_span))
        exec {_fp_fd}>>"$chime_port_locks/$_fp_port.lock" || continue
        if flock -n "$_fp_fd" && ! (exec 3<>"/dev/tcp/127.0.0.1/$_fp_port") 2>/dev/null; then
            printf -v "$_fp_var" '%s' "$_fp_port"
            return 0
        fi
        exec {_fp_fd}>&-
    done
    echo "free_port: no free port between $_fp_low and $_fp_high" >&2
    return 1
}
