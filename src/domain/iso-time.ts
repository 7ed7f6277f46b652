/**
 * `new Date(ms).toISOString()`, byte for byte. The built-in costs about as
 * much as the rest of a record's conversion put together, and a record has a
 * dozen timestamps; this is plain arithmetic (days to a proleptic Gregorian
 * date, in 400-year eras). Dates outside years 1000 to 9999, whose year
 * `toISOString` writes differently, and invalid ones, which it refuses, are
 * left to the built-in.
 */
export function isoString(ms: number): string {
  if (!(ms >= firstFastMs && ms < endFastMs)) return new Date(ms).toISOString();
  // A Date keeps whole milliseconds, dropping any fraction toward zero.
  const time = Math.trunc(ms);
  const days = Math.floor(time / msPerDay);
  const inDay = time - days * msPerDay;
  // Day 0 of an era is 0000-03-01, so the leap day ends a year.
  const shifted = days + 719_468;
  const era = Math.floor(shifted / 146_097);
  const dayOfEra = shifted - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra -
      Math.floor(dayOfEra / 1_460) +
      Math.floor(dayOfEra / 36_524) -
      Math.floor(dayOfEra / 146_096)) /
      365,
  );
  const dayOfYear =
    dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * monthFromMarch + 2) / 5) + 1;
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  const year = era * 400 + yearOfEra + (month <= 2 ? 1 : 0);
  const hours = Math.floor(inDay / 3_600_000);
  const minutes = Math.floor(inDay / 60_000) % 60;
  const seconds = Math.floor(inDay / 1_000) % 60;
  const millis = inDay % 1_000;
  return `${year}-${twoDigits[month]}-${twoDigits[day]}T${twoDigits[hours]}:${
    twoDigits[minutes]
  }:${twoDigits[seconds]}.${threeDigits[millis]}Z`;
}

const msPerDay = 86_400_000;
/** 1000-01-01T00:00:00.000Z and 10000-01-01T00:00:00.000Z. */
const firstFastMs = Date.UTC(1000, 0, 1);
const endFastMs = Date.UTC(10000, 0, 1);

// Looked up rather than formatted: number-to-string conversions were most of the cost.
const twoDigits = Array.from({ length: 60 }, (_, n) => String(n).padStart(2, "0"));
const threeDigits = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, "0"));
