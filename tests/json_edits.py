"""A helper the run-file tests share: a JSON document with one field changed or removed."""

import copy

DELETE = object()  # as a value: remove the field instead of setting it


def edited(doc, path, value):
    """A deep copy of `doc` with the field at `path` (a tuple of keys) set, or deleted when
    value is DELETE."""
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc
