# storage/local.mk: conversations, parts, reasoning memory and search in SQLite.
