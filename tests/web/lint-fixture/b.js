// The other half of the cycle, importing a.js back.
import { a } from './a.js';

export const b = { c: () => a, d(q) { if (q) { return `}${q}`; } return q / 2 / 3; } };
