"""IdMemo: what a pass derived from an object that is never changed (a parsed runtime item, a
lowered function, its selected instructions), once per process, keyed by the object's identity;
the object is held, so that its id is not reused, and the memo starts afresh past `limit`."""
from __future__ import annotations


class IdMemo:
    def __init__(self, limit: int):
        self.limit = limit
        self.entries: dict[int, tuple[object, object]] = {}

    def get(self, obj: object):              # what was put for this very object, or None
        hit = self.entries.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: object, value):
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[id(obj)] = (obj, value)
        return value
