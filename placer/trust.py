"""Which compiled modules this machine made: an HMAC key per user, kept outside plan directories.

Loading a plan directory's ``module.so`` (``placer run --executor relax --compiled``) runs native
code. A SHA-256 recorded in the same directory proves the file did not change, not who made it:
anyone who can write the directory can replace both. So when placer compiles a module it also
records ``hmac``: an HMAC-SHA256, under this user's key, of the module's SHA-256 and the plan it
was compiled for (:func:`tag`); before loading one it recomputes it (:func:`verify`). A module
copied from elsewhere, or planted, has no valid tag and is refused unless the user passes
``--trust``.

The key is 32 random bytes in ``~/.config/placer/trust.key`` (``$PLACER_TRUST_KEY`` names another
file), created with mode 0600 in a 0700 folder on first use. A key file that is not a regular
file, not the user's own, or readable or writable by others is refused: it would let them mint
tags.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from placer.errors import PlacerError

KEY_ENV = "PLACER_TRUST_KEY"
KEY_BYTES = 32


class TrustError(PlacerError):
    """The trust key cannot be used, or an artifact is not one this machine made."""


def key_path() -> Path:
    """``$PLACER_TRUST_KEY``, else ``~/.config/placer/trust.key`` (read at each call)."""
    env = os.environ.get(KEY_ENV)
    return Path(env) if env else Path.home() / ".config" / "placer" / "trust.key"


def _read_key(p: Path) -> bytes:
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)  # non-blocking: a FIFO is refused below, not waited on
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TrustError(f"trust key {p}: not a regular file")
        if st.st_uid != os.getuid():
            raise TrustError(f"trust key {p}: owned by uid {st.st_uid}, not by this user")
        if st.st_mode & 0o077:
            raise TrustError(f"trust key {p}: mode {stat.S_IMODE(st.st_mode):o} lets others read or write "
                             "it; make it 0600 (chmod 600) or delete it to make a new one")
        key = os.read(fd, 4 * KEY_BYTES)
    finally:
        os.close(fd)
    if len(key) < KEY_BYTES:
        raise TrustError(f"trust key {p}: shorter than {KEY_BYTES} bytes; delete it to make a new one")
    return key


def load_key(create: bool) -> bytes | None:
    """This user's key; made when missing and ``create`` (else None). TrustError if unusable."""
    p = key_path()
    try:
        return _read_key(p)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as exc:  # permissions, a dangling link ...
        raise TrustError(f"trust key {p}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:  # another process made it meanwhile
        return _read_key(p)
    except OSError as exc:
        raise TrustError(f"trust key {p}: cannot create it ({exc.strerror or type(exc).__name__})") from None
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
    finally:
        os.close(fd)
    return _read_key(p)


def _message(sha256: str, context: dict[str, str]) -> bytes:
    parts = [f"placer.trust.v1\nsha256={sha256}"] + [f"{k}={context[k]}" for k in sorted(context)]
    return "\n".join(parts).encode()


def tag(sha256: str, context: dict[str, str]) -> str:
    """The HMAC-SHA256 (hex) of an artifact's SHA-256 and its context under this user's key (made
    on first use)."""
    key = load_key(create=True)
    return hmac.new(key, _message(sha256, context), hashlib.sha256).hexdigest()


def verify(sha256: str, context: dict[str, str], recorded: object) -> bool:
    """True iff ``recorded`` is this user's tag of the artifact (False without a key)."""
    key = load_key(create=False)
    if key is None or not isinstance(recorded, str):
        return False
    want = hmac.new(key, _message(sha256, context), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, recorded)
