/* chcompare: same answers from both stores. ck_same_answers() ships the
 * SQLite database at db_path into the ClickHouse database at url (one
 * hs_chship_pass), then asks both stores every question of the API about
 * every run (runs with filters, the run, history, top by site, function and
 * stack at the peak, the end and a moment between buckets, flame, leaks,
 * sizes, diff within and across runs, the four exports) and compares the
 * answers field by field. Ids differ by design (local row ids there,
 * content ids here): a SQLite id is translated through the shipper's map
 * before it is compared; doubles are equal to 1e-9 relative; everything
 * else must be equal, arrays in the same order (rows that tie are ordered
 * by their content, never by a store's ids) and files byte for byte.
 * Differences are printed; returns their number (a failed cmocka assertion
 * when shipping fails).
 */
#ifndef HS_CHCOMPARE_H
#define HS_CHCOMPARE_H

/* query_url: the ClickHouse store to ask (another server of the cluster);
 * NULL: url. */
int ck_same_answers(const char *db_path, const char *url, const char *query_url);

#endif
