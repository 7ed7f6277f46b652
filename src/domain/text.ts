/**
 * The one rule every text a caller sends is held to, on every protocol,
 * before it is stored or sent on in a webhook:
 * - well-formed Unicode: no lone surrogate (JSON can write one, `"\ud800"`,
 *   and no UTF-8 encoder can carry it on);
 * - no control characters (Unicode's Cc: C0, DEL and C1), but tab and
 *   newline in multi-line text (descriptions, notes, bodies), where a
 *   carriage return before a newline is dropped;
 * - no bidirectional embeddings, overrides or isolates (U+202A–U+202E,
 *   U+2066–U+2069): one in a name reorders what follows it wherever the
 *   name is shown ("Trojan Source"); the marks LRM, RLM and ALM, which
 *   right-to-left text needs, stay;
 * - normalised to NFC, so the same words typed on two systems are one value;
 * - trimmed of surrounding white space;
 * - blank when nothing visible is left: white space, format characters
 *   (zero-width spaces, bidirectional marks) and marks with nothing to mark.
 */

/** How a text may be laid out. */
export type TextForm = "line" | "multiline";

/** A text cleaned, or why it cannot be. */
export type CleanedText =
  | { readonly text: string; readonly blank: boolean }
  | { readonly refused: string };

const controlCharacter = /\p{Cc}/u;
const controlCharacterButLayout = /[^\P{Cc}\t\n]/u;
const bidiControl = /[\u202a-\u202e\u2066-\u2069]/u;
const invisibleOnly = /^[\p{White_Space}\p{Cf}\p{M}\p{Default_Ignorable_Code_Point}]*$/u;

export function cleanText(value: string, form: TextForm): CleanedText {
  if (!value.isWellFormed()) return { refused: loneSurrogate };
  const laidOut = form === "multiline" ? value.replaceAll("\r\n", "\n") : value;
  const control = (form === "multiline" ? controlCharacterButLayout : controlCharacter).exec(
    laidOut,
  );
  if (control) {
    const codePoint = codePointOf(control[0]);
    const allowed = form === "multiline" ? " other than tab and newline" : "";
    return { refused: `must not contain control characters${allowed} (it has U+${codePoint})` };
  }
  const bidi = bidiControl.exec(laidOut);
  if (bidi) {
    return {
      refused: `must not contain bidirectional embedding, override or isolate controls (it has U+${codePointOf(bidi[0])})`,
    };
  }
  const text = laidOut.normalize("NFC").trim();
  return { text, blank: invisibleOnly.test(text) };
}

/** The refusal of a text with a lone surrogate, the same on every protocol. */
export const loneSurrogate = "must be well-formed Unicode text (it has a lone surrogate)";

/** A character as Unicode names it: `202E`. */
function codePointOf(character: string): string {
  return (character.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, "0");
}
