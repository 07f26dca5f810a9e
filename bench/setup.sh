#!/usr/bin/env bash
# `make bench`, step 1: the Debian packages the benchmark needs — postfix (for smtp-sink and smtp-source only:
# its daemon is never started, and stopped here if the package's postinst started it), PostgreSQL, Redis.
set -euo pipefail

need=()
[ -x /usr/sbin/smtp-sink ] || need+=(postfix)
command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v ss >/dev/null 2>&1 || need+=(iproute2)

if [ ${#need[@]} -gt 0 ]; then
    echo "bench: installing ${need[*]} from Debian"
    # "No configuration": the package installs its programs and leaves the mail system unconfigured.
    echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Postfix's own daemon must not run: we only want smtp-sink and smtp-source.
if command -v postfix >/dev/null 2>&1 && postfix status >/dev/null 2>&1; then
    echo "bench: the postfix package started its daemon; stopping it"
    postfix stop >/dev/null 2>&1 || true
    sleep 1
fi
if ss -Hltn 'sport = :25' | grep -q .; then
    echo "bench: something still listens on port 25:" >&2
    ss -Hltnp 'sport = :25' >&2
    exit 1
fi
id postfix >/dev/null 2>&1 || { echo "bench: the postfix user is missing (smtp-sink runs as it)" >&2; exit 1; }
