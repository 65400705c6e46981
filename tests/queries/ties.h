/* ties: rows that tie are in content order, whatever the store. The quiet
 * fixture (fixture.h) holds FX_QUIET_STACKS sites of exactly 100 bytes
 * each, site1 .. site64, whose trace and frame ids rise with their numbers
 * while their names do not (site10 comes before site2): an answer ordered
 * by ids lists site1, site2, site3 …, one ordered by content site1,
 * site10, site11 …. fx_ties_check() asks the store behind q (its run, the
 * only one) top by site, function and stack, leaks, history's series, the
 * flame graph and the collapsed export, and checks their first rows;
 * returns the answers out of order (each printed). */
#ifndef HS_TEST_TIES_H
#define HS_TEST_TIES_H

#include "hs_queries.h"

int fx_ties_check(hs_q *q);

#endif
