"""A second DKIM verifier, independent of dkimpy: Perl's Mail::DKIM (Debian's libmail-dkim-perl; RSA only in
Debian 12's 1.20230212), reading the public key from the loopback DNS server."""

from __future__ import annotations

import shutil
import subprocess

from tests.support.services import skip_or_fail

_SCRIPT = r"""
use strict; use warnings;
use Mail::DKIM::Verifier; use Net::DNS::Resolver;
my $port = shift @ARGV;
Mail::DKIM::DNS::resolver(Net::DNS::Resolver->new(nameservers => ['127.0.0.1'], port => $port, recurse => 0,
    udp_timeout => 5, tcp_timeout => 5));
my $dkim = Mail::DKIM::Verifier->new();
binmode STDIN;
local $/;
$dkim->PRINT(<STDIN>);
$dkim->CLOSE;
print $dkim->result, ($dkim->result eq 'pass' ? '' : "\n" . $dkim->result_detail), "\n";
"""


def require_mail_dkim() -> None:
    """Skip (fail, when services are required) unless perl has Mail::DKIM."""
    perl = shutil.which("perl")
    if perl is None:
        skip_or_fail("perl is not installed: the second DKIM verifier is Perl's Mail::DKIM")
        return
    probe = subprocess.run(
        [perl, "-MMail::DKIM::Verifier", "-MNet::DNS::Resolver", "-e", "1"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        skip_or_fail("Perl's Mail::DKIM is not installed (apt-get install libmail-dkim-perl)")


def mail_dkim_result(message: bytes, dns_port: int) -> str:
    """Mail::DKIM's result for `message` (a CRLF message): "pass", else the result ("fail", "invalid", "none")
    and its detail on a second line."""
    done = subprocess.run(
        ["perl", "-e", _SCRIPT, str(dns_port)], input=message, capture_output=True, check=True, timeout=30
    )
    return done.stdout.decode("utf-8", "replace").strip()
