"""Seeded shares: the helper-seed compression of Prio3 (IETF VDAF draft).

A sharing is a set of C *components* that sum to the value: additive sharing
among S servers has C = S of them (server i holds component i); replicated
sharing has C = 3 (server i holds the pair of components i and i-1). With
``--sharing seeded`` client j sends one component, c_j = j mod C, in full
(value minus the others) and every other component as a 32-byte seed that it
draws for itself from ``os.urandom``; a server expands the seeds it receives
itself as they arrive (timed as ``stream_expand_s``).
This is Prio3's helper-seed idea with the "leader" spread over the servers: who
leads for client j is public, so every server receives the full words of about
1/C of the clients and seeds for the rest, about 1/S of the full-sharing bytes
each at S = 3 (additive: 8 s d n/3 + 64 n/3 bytes against 8 s d n; replicated:
server i gets full words for the 2n/3 clients that lead with component i or i-1,
one word each, against two words for every client), so each server's inbound
link, which limits the upload, carries a third as much. With one fixed leader
that server received as much as with full sharing.

Security is that of one fixed leader, client by client: for each client a
server holds, per component it holds, either that component's seed or its full
words, and the full component is the value minus C-1 independent pseudorandom
components, so it is pseudorandom by itself. Any S-1 servers (additive) or any
one server (replicated) miss at least one component of every client, which
masks the value; their view is pseudorandom as long as the generator is a good
PRG. Seeds are drawn per client and per component, so no server learns
anything about another client's masks. Seeded shares hide the data
computationally, where full shares (uniform words from a CSPRNG, one word per
word) are as close to information-theoretic as the generator allows. The
generator, a component's words under its seed, is AES-256-CTR
(:mod:`harness.clients.keystream`, which says why).

The clients send these components a chunk of clients at a time
(:mod:`harness.stream.seeded`, which lays out each chunk's seeds and full
words); this module holds who leads with which component and what each server
receives.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.clients.keystream import SEED_BYTES, expand
from harness.clients.sharing import ShareFormat

__all__ = ["SEED_BYTES", "Components", "components", "expand"]


@dataclass(frozen=True)
class Components:
    """Which component each server holds in each word of its shares; client j sends
    component j mod ``count`` in full and the others as seeds."""

    count: int
    held: tuple[tuple[int, ...], ...]  # held[i][w]: component in word w of server i

    def full_clients(self, comp: int, clients: int) -> int:
        """How many clients send ``comp`` in full."""
        return len(range(comp, clients, self.count))

    def upload_bytes(self, party: int, clients: int, words_per_client: int) -> int:
        """What server ``party`` receives: per component it holds, seeds and full words."""
        return sum(SEED_BYTES * (clients - self.full_clients(c, clients))
                   + 8 * words_per_client * self.full_clients(c, clients)
                   for c in self.held[party])


def components(fmt: ShareFormat, parties: int) -> Components:
    if fmt.words == 1:
        return Components(parties, tuple((i,) for i in range(parties)))
    # Replicated: x = a_0 + a_1 + a_2 and server i holds (a_i, a_{i-1}).
    return Components(3, tuple((i, (i - 1) % 3) for i in range(3)))
