/* kit_check: a measured value compared with the known answer within a
 * stated tolerance; a miss is said on stderr (what, the value, the answer,
 * the bound) and fails the current cmocka test.
 */
#ifndef HS_KIT_CHECK_H
#define HS_KIT_CHECK_H

/* |got - want| <= tol. */
void tk_near(const char *what, double got, double want, double tol);
/* |got - want| <= rel * |want| (|got| <= rel when want is 0). */
void tk_near_rel(const char *what, double got, double want, double rel);

#endif
