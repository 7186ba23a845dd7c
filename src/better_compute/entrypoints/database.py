"""The database a server command opens: named for the operator, checked before it is opened, and
told in one line when it cannot be.

`serve`, `admin bootstrap` and `migrate` take a URL from `--database-url`, else from one of
`BC_DATABASE_URL`, the file `BC_DATABASE_URL_FILE` names, or the systemd credential `database-url`
(`given_url`). A wrong one used to end in a SQLAlchemy traceback; each way it goes wrong is an
`Unusable` here, whose message says what to do, and which the command prints as `error: ...` and
exits with its status: 2 for a URL that cannot work as given (usage), 1 for a database server that
does not answer.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from better_compute.storage.kernel.db import normalise_url

USAGE = 2
"""Exit status of a URL that cannot work as given, as for any other bad argument."""
UNREACHABLE = 1
"""Exit status of a database server that did not answer: the URL may be right and the server down."""

EXAMPLES = "sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"
DRIVERS = {"sqlite": "pysqlite", "postgresql": "psycopg"}
"""Dialects and drivers this server runs on (after `normalise_url`): SQLite and PostgreSQL on psycopg 3."""


URL_VARIABLE = "BC_DATABASE_URL"
URL_FILE_VARIABLE = "BC_DATABASE_URL_FILE"
"""Names a file that holds the URL: a secret (it may hold a password) kept off the command line,
where `ps` shows it to every user, and out of the environment of whoever starts the server."""
CREDENTIAL = "database-url"
"""The systemd credential (`LoadCredential=database-url:PATH`) read from `$CREDENTIALS_DIRECTORY`:
systemd hands it to the service alone, on a file system that is never swapped out."""
URL_FILE_LIMIT = 64 * 1024
"""The most bytes read from a URL file: a URL is a line; a path to a device that never ends is not."""


@dataclass(frozen=True)
class Unusable(Exception):
    """The database cannot be used as given; `message` says why and what to do."""

    message: str
    status: int = USAGE

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Target:
    """The database a URL names: `url` is the parsed form (password hidden when shown)."""

    url: URL

    @property
    def sqlite_path(self) -> Path | None:
        """The absolute path of a SQLite file; None for PostgreSQL or an in-memory database."""
        if self.url.get_backend_name() != "sqlite" or self.url.database in (None, "", ":memory:"):
            return None
        if str(self.url.database).startswith("file::memory:") or self.url.query.get("mode") == "memory":
            return None  # SQLite's URI form of an in-memory database
        return Path(str(self.url.database)).expanduser().absolute()

    def describe(self) -> str:
        """The database in words, e.g. `the SQLite database /srv/bc/better-compute.db`."""
        path = self.sqlite_path
        if self.url.get_backend_name() == "sqlite":
            return f"the SQLite database {path}" if path else "an in-memory SQLite database"
        return f"the PostgreSQL database {self.url.database} on {self.server()}"

    def server(self) -> str:
        """`user@host:port` of a PostgreSQL database."""
        user = f"{self.url.username}@" if self.url.username else ""
        return f"{user}{self.url.host or 'localhost'}:{self.url.port or 5432}"


def given_url(option: str | None, environ: Mapping[str, str]) -> str | None:
    """The database URL the operator gave, or None for the default (`Settings` reads `BC_DATABASE_URL`
    itself, so None is also the answer when that variable is the one source).

    `--database-url` wins over everything. Without it, one of `BC_DATABASE_URL`, the file that
    `BC_DATABASE_URL_FILE` names and the credential `database-url` in `$CREDENTIALS_DIRECTORY` may
    give it; two of them are refused rather than one silently preferred, as a server started on the
    wrong database is worse than one that does not start."""
    if option is not None:
        return option
    sources: list[str] = []
    if URL_VARIABLE in environ:
        sources.append(URL_VARIABLE)
    named = environ.get(URL_FILE_VARIABLE)
    if named is not None:
        sources.append(f"{URL_FILE_VARIABLE} ({named})")
    credential = _credential(environ)
    if credential is not None:
        sources.append(f"the credential {CREDENTIAL} ({credential})")
    if len(sources) > 1:
        raise Unusable(
            f"the database URL is given {'twice' if len(sources) == 2 else f'{len(sources)} times'},"
            f" in {' and in '.join(sources)}: keep one"
            " (or pass --database-url, which wins)"
        )
    if named is not None:
        if not named.strip():
            raise Unusable(f"{URL_FILE_VARIABLE} is empty: set it to the file that holds the database URL")
        return url_from_file(Path(named), f"named by {URL_FILE_VARIABLE}")
    if credential is not None:
        return url_from_file(credential, f"the credential {CREDENTIAL}")
    return None


def _credential(environ: Mapping[str, str]) -> Path | None:
    """`$CREDENTIALS_DIRECTORY/database-url` where systemd loaded it; None where it did not (a unit
    may load other credentials and give the URL another way). A directory this process may not
    look into counts as holding it, so that reading it says why it cannot be read."""
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return None
    path = Path(directory) / CREDENTIAL
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return path
    return path


def url_from_file(path: Path, given_as: str) -> str:
    """The URL a file holds: its one line, without surrounding blanks. A file that cannot be read,
    is empty, holds more than one line or no URL is an `Unusable` naming the file (and `given_as`:
    how it was named, e.g. `named by BC_DATABASE_URL_FILE`), never quoting what it holds: that may
    be a password."""
    where = f"{path} ({given_as})"
    try:
        with path.open("rb") as file:
            data = file.read(URL_FILE_LIMIT + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno == errno.EACCES:
            fix = (
                "make it readable by the user that runs better-compute (owned by it, mode 0600),"
                " or let systemd read it: LoadCredential=database-url:PATH"
            )
        elif exc.errno == errno.ENOENT:
            fix = "write the database URL into it (mode 0600), or name another file"
        else:
            fix = "name a file that holds the database URL"
        raise Unusable(f"cannot read the database URL from {where}: {reason.lower()}; {fix}") from None
    if len(data) > URL_FILE_LIMIT:
        raise Unusable(
            f"{where} is larger than {URL_FILE_LIMIT} bytes; it should hold one line, the database URL"
        )
    try:
        lines = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise Unusable(f"{where} is not UTF-8 text; it should hold one line, the database URL") from None
    if not lines:
        raise Unusable(f"{where} is empty; write the database URL into it ({EXAMPLES})")
    if len(lines) > 1:
        raise Unusable(f"{where} holds {len(lines)} lines; it should hold one, the database URL")
    try:
        make_url(normalise_url(lines[0]))
    except ArgumentError:
        raise Unusable(f"{where} does not hold a database URL: write one into it ({EXAMPLES})") from None
    return lines[0]


def target(url: str) -> Target:
    """The database `url` names, refused when this server cannot run on it (scheme or driver)."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        raise Unusable(f"{url!r} is not a database URL: use {EXAMPLES}") from None
    backend = parsed.get_backend_name()
    if backend not in DRIVERS or parsed.get_driver_name() != DRIVERS[backend]:
        raise Unusable(
            f"unsupported database {parsed.drivername!r} in {_shown(parsed)}:"
            f" better-compute runs on SQLite and on PostgreSQL with psycopg 3; use {EXAMPLES}"
        )
    return Target(parsed)


def check(found: Target, *, create: bool) -> None:
    """Refuse a SQLite file that cannot be opened: its directory missing, or (unless `create`) the
    file itself, so that a command run in the wrong directory does not make a new, empty database."""
    path = found.sqlite_path
    if path is None:
        return
    if not path.parent.is_dir():
        raise Unusable(
            f"cannot create {found.describe()}: the directory {path.parent} does not exist;"
            " create it, or give another --database-url (or BC_DATABASE_URL)"
        )
    if not create and not path.exists():
        raise Unusable(
            f"{found.describe()} does not exist (working directory: {Path.cwd()}): pass --create to"
            " create it, or give the server's database with --database-url (or BC_DATABASE_URL)"
        )


def explain(error: SQLAlchemyError, found: Target) -> Unusable:
    """An error from opening the database, as one line with the fix."""
    cause = str(getattr(error, "orig", None) or error).strip().splitlines()
    first = cause[0] if cause else type(error).__name__
    text = " ".join(cause).lower()
    url = found.url
    if url.get_backend_name() == "postgresql":
        server = found.server()
        if "does not exist" in text and f'database "{url.database}"' in text:
            return Unusable(
                f'database "{url.database}" does not exist on {server}: create it'
                f" (createdb -h {url.host or 'localhost'} -p {url.port or 5432}"
                f"{f' -U {url.username}' if url.username else ''} {url.database})"
                " or give another --database-url (or BC_DATABASE_URL)"
            )
        if "connection refused" in text or "could not connect" in text or "timeout" in text:
            return Unusable(
                f"no PostgreSQL server answers at {server} ({first.removeprefix('connection failed: ')}):"
                " start it, or fix the host and port in --database-url (or BC_DATABASE_URL)",
                UNREACHABLE,
            )
        return Unusable(f"cannot open {found.describe()}: {first}", UNREACHABLE)
    return Unusable(f"cannot open {found.describe()}: {first}")


def unreachable(found: Target, cause: str) -> Unusable:
    """A database that opened and then stopped answering, as one line."""
    return Unusable(
        f"{found.describe()} stopped answering ({cause}): start it, and run the command again", UNREACHABLE
    )


def unwritable(found: Target, cause: str) -> Unusable:
    """A database that opened but refuses a write (a read-only SQLite file, a PostgreSQL standby), as
    one line with the fix."""
    path = found.sqlite_path
    fix = (
        f"make {path} and its directory writable by the user that runs better-compute"
        if path is not None
        else "point --database-url (or BC_DATABASE_URL) at the primary, which takes writes"
    )
    return Unusable(f"cannot write to {found.describe()} ({cause}): {fix}", UNREACHABLE)


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


__all__ = [
    "CREDENTIAL",
    "URL_FILE_VARIABLE",
    "Target",
    "Unusable",
    "check",
    "explain",
    "given_url",
    "target",
    "unreachable",
    "unwritable",
    "url_from_file",
]
