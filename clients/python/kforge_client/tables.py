"""kforge_client.tables -- lists of records that turn into tables.

IterationList is a plain list of the iteration dicts the service sent (the
caller owns it); rows() flattens each into one level of dotted columns
(``params.TILE_F``, ``profile.total_time_ns``), and to_dataframe() makes a
pandas DataFrame of those rows when pandas is installed.  pandas is never
needed for anything else: without it, to_dataframe() raises ImportError
saying how to get it.
"""

__all__ = ["IterationList", "flatten"]


def flatten(record, prefix=""):
    """One level of ``a.b.c`` keys for the nested dicts of record (lists and
    other values are kept as they are)."""
    out = {}
    for key, value in record.items():
        name = prefix + str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class IterationList(list):
    """The iterations of a job, in (attempt, seq) order."""

    def rows(self):
        """The iterations as flat dicts, every row with every column (None
        where an iteration lacks one), columns in order of first appearance."""
        flat = [flatten(it) for it in self]
        columns = {}
        for row in flat:
            for name in row:
                columns.setdefault(name, None)
        return [{name: row.get(name) for name in columns} for row in flat]

    def to_dataframe(self):
        """A pandas DataFrame of rows(), one row per iteration."""
        try:
            import pandas
        except ImportError as exc:
            raise ImportError("IterationList.to_dataframe() needs pandas, which is not installed "
                              "(pip install pandas, or apt-get install python3-pandas); rows() gives "
                              "the same table as a list of dicts without it") from exc
        return pandas.DataFrame(self.rows())
