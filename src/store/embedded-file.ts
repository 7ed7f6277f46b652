/** The embedded engine's database file in DATA_DIR (a leaf: read by starts that load no store). */
export const embeddedDatabaseFile = "referrals.sqlite";
