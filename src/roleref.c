/*-------------------------------------------------------------------------
 *
 * roleref.c
 *		distlock.role_ref: the role a row belongs to, kept across dumps.
 *
 * Every lock grant, session, job, throttle and limit records a role.  As
 * regrole, a dump writes the role's name and a restore reads it back, so
 * rows keep their role in another cluster whatever OID it has there; but
 * regrole's input fails for a name no role has, and the failure aborts
 * the COPY of the whole table: one role missing on the target lost every
 * row.  role_ref is regrole with a forgiving input: a name no role has, or
 * a number (an OID means nothing in another cluster), reads as 0, a row of
 * no role, with a WARNING, and the row is kept.  Only administrators may
 * act on such rows (access.c: nobody has the privileges of role 0), and
 * reassign_owned('-', ...) or drop_owned('-') deals with them.  Its
 * output writes 0, and an OID no role has any more (rows a DROP ROLE left
 * behind), as '-', so a dump never carries an OID to where it means
 * another role.
 *
 * The type is binary-coercible to and from regrole and oid, so the
 * functions pass and compare it as they did regrole, the columns changed
 * type without a rewrite, and its indexes use oid's operator class.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/roleref.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/varlena.h"

#include "compat.h"

PG_FUNCTION_INFO_V1(distlock_role_ref_in);
PG_FUNCTION_INFO_V1(distlock_role_ref_out);
PG_FUNCTION_INFO_V1(distlock_role_ref_recv);
PG_FUNCTION_INFO_V1(distlock_role_ref_send);

/*
 * The OID of role name (as written by role_ref_out(): an identifier,
 * quoted if need be), or 0 with a WARNING if no role has it.  One WARNING
 * per name in a row, not one per row of a restore.
 */
static Oid
role_ref_parse(const char *str)
{
	static char last_missing[NAMEDATALEN * 2 + 3] = "";
	List	   *names;
	Oid			role;

	if (strcmp(str, "-") == 0)
		return InvalidOid;
	if (str[0] >= '0' && str[0] <= '9' &&
		strspn(str, "0123456789") == strlen(str))
		role = InvalidOid;
	else
	{
		names = dl_qualified_name_list(str);
		if (list_length(names) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid name syntax")));
		role = get_role_oid(strVal(linitial(names)), true);
		if (OidIsValid(role))
			return role;
	}
	if (strncmp(last_missing, str, sizeof(last_missing)) != 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role \"%s\" does not exist", str),
				 errdetail("The distlock rows of that role now belong to no role."),
				 errhint("An administrator can give them to a role with distlock.reassign_owned('-', role).")));
		strlcpy(last_missing, str, sizeof(last_missing));
	}
	return InvalidOid;
}

/* The name of role, quoted if need be; '-' for 0 or a role that is gone. */
static char *
role_ref_name(Oid role)
{
	char	   *name = OidIsValid(role) ? GetUserNameFromId(role, true) : NULL;

	return name ? pstrdup(quote_identifier(name)) : pstrdup("-");
}

Datum
distlock_role_ref_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_OID(role_ref_parse(PG_GETARG_CSTRING(0)));
}

Datum
distlock_role_ref_out(PG_FUNCTION_ARGS)
{
	PG_RETURN_CSTRING(role_ref_name(PG_GETARG_OID(0)));
}

/* Binary I/O carries the name too: an OID means nothing elsewhere. */
Datum
distlock_role_ref_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);

	PG_RETURN_OID(role_ref_parse(pq_getmsgstring(buf)));
}

Datum
distlock_role_ref_send(PG_FUNCTION_ARGS)
{
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendstring(&buf, role_ref_name(PG_GETARG_OID(0)));
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}
