/*-------------------------------------------------------------------------
 *
 * advisory.c
 *		Helpers for users of PostgreSQL's advisory locks: lock_key.
 *
 * Advisory locks are keyed by one bigint (or two integers), so applications
 * that name their locks hash the name.  Hashing to 32 bits (hashtext(), or
 * a fold of a longer hash) collides once a few tens of thousands of names
 * are in use; lock_key() keeps 64 bits of SHA-256, where a collision needs
 * billions of names.  The key is the first 8 bytes of the digest of the
 * name's UTF-8 bytes, read as a little-endian signed integer: what Python's
 * struct.unpack('<q', hashlib.sha256(name.encode()).digest()[:8]) gives,
 * and struct.unpack('q', ...) on common (little-endian) hardware, so keys
 * computed in the database and in the application agree.  The name is
 * converted to UTF-8 first, so the key does not depend on the database
 * encoding.  The digest is the backend's own SHA-256 (src/common).
 *
 * The distlock.advisory_locks view, which decodes pg_locks, is plain SQL in
 * the install script.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/advisory.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_lock_key);

/*
 * lock_key(name text) RETURNS bigint
 *
 * The advisory-lock key of name: the first 8 bytes of the SHA-256 of its
 * UTF-8 encoding, as a little-endian signed 64-bit integer.  Any text is a
 * name here, the empty string included; NULL raises 22004 (a NULL key would
 * make pg_try_advisory_lock() answer NULL, which reads as "not acquired").
 */
/*
 * The keys of the last inputs, most recent first: a worker's calls digest
 * the same queue, lock and session names over and over (a claim's wake-up
 * key, a session's lock tags), and a digest costs more than the rest of a
 * wake-up.  Inputs longer than a single-byte name and its owner's OID are
 * not kept.
 */
#define SHA_CACHE_SIZE	4
#define SHA_CACHE_INPUT	(DISTLOCK_MAX_NAME_CHARS + sizeof(Oid))

typedef struct ShaCacheEntry
{
	size_t		len;
	uint64		key;
	uint8		data[SHA_CACHE_INPUT];
} ShaCacheEntry;

static ShaCacheEntry sha_cache[SHA_CACHE_SIZE];
static int	sha_cache_used = 0;

/*
 * The first 8 bytes of the SHA-256 digest of data, as a little-endian
 * integer: lock_key()'s key, and the key of a session's lock tags
 * (session.c), which must not tell other roles the session's id.
 */
uint64
dl_sha256_key(const uint8 *data, size_t len)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	uint64		key = 0;
	ShaCacheEntry found;

	for (int i = 0; i < sha_cache_used; i++)
	{
		if (sha_cache[i].len != len || memcmp(sha_cache[i].data, data, len) != 0)
			continue;
		found = sha_cache[i];
		memmove(&sha_cache[1], &sha_cache[0], i * sizeof(ShaCacheEntry));
		sha_cache[0] = found;
		return found.key;
	}

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute SHA-256 digest: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);

	for (int i = 7; i >= 0; i--)
		key = (key << 8) | digest[i];

	if (len <= SHA_CACHE_INPUT)
	{
		if (sha_cache_used < SHA_CACHE_SIZE)
			sha_cache_used++;
		memmove(&sha_cache[1], &sha_cache[0],
				(sha_cache_used - 1) * sizeof(ShaCacheEntry));
		sha_cache[0].len = len;
		sha_cache[0].key = key;
		memcpy(sha_cache[0].data, data, len);
	}
	return key;
}

Datum
distlock_lock_key(PG_FUNCTION_ARGS)
{
	text	   *name;
	char	   *utf8;
	int			len;

	dl_arg_not_null(fcinfo, 0, "name");
	name = PG_GETARG_TEXT_PP(0);
	len = VARSIZE_ANY_EXHDR(name);
	utf8 = pg_server_to_any(VARDATA_ANY(name), len, PG_UTF8);
	if (utf8 != VARDATA_ANY(name))
		len = strlen(utf8);

	PG_RETURN_INT64((int64) dl_sha256_key((uint8 *) utf8, len));
}
