/* hs_testkit: the one test kit, linked by every test binary (and the load
 * generator of bench/server) as the static library hs_testkit. Each job has
 * one function, in one of these topical parts:
 *
 *   kit_proc.h    paths of the trees, temporary directories, programs run
 *                 (to their end or in the background) under the collector
 *   kit_server.h  a real heapstore-server on an ephemeral port (through the
 *                 readiness handshake of common/hs_spawn.h), its log, HTTP
 *   kit_db.h      a value read from a database, and waiting until it holds
 *   kit_check.h   comparisons with a tolerance, said when they fail
 *   kit_stream.h  streams encoded as a collector sends them, and a client
 *
 * Names are tk_<job>; the functions that assert (kit_db, kit_check and
 * tk_expect_ok) fail the current cmocka test.
 */
#ifndef HS_TESTKIT_H
#define HS_TESTKIT_H

#include "kit_check.h"
#include "kit_db.h"
#include "kit_proc.h"
#include "kit_server.h"
#include "kit_stream.h"

#endif
