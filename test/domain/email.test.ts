import test from "ava";
import { canonicalEmail, isValidEmail, normalizeEmailForLookup } from "../../src/domain/email.js";

test("lookup form: trimmed and lowercased, nothing else", (t) => {
  t.is(normalizeEmailForLookup("  Jane.Doe+x@Example.COM "), "jane.doe+x@example.com");
});

test("canonical form: case and surrounding spaces", (t) => {
  t.is(canonicalEmail("  Jane@Example.com "), "jane@example.com");
});

test("canonical form: a +tag is dropped", (t) => {
  t.is(canonicalEmail("jane+promo@example.com"), "jane@example.com");
});

test("canonical form: dots count outside Gmail", (t) => {
  t.is(canonicalEmail("jane.doe@example.com"), "jane.doe@example.com");
});

test("canonical form: Gmail ignores dots, and googlemail.com is gmail.com", (t) => {
  t.is(canonicalEmail("J.a.n.e.Doe+spring@GoogleMail.com"), "janedoe@gmail.com");
  t.is(canonicalEmail("jane.doe@gmail.com"), canonicalEmail("janedoe@gmail.com"));
});

test("canonical form: Yahoo's -tag aliases, Outlook's and iCloud's +tags", (t) => {
  t.is(canonicalEmail("Jane-promo@yahoo.com"), "jane@yahoo.com");
  t.is(canonicalEmail("jane-promo@ymail.com"), canonicalEmail("jane@ymail.com"));
  t.is(canonicalEmail("jane-doe@example.com"), "jane-doe@example.com", "a - counts elsewhere");
  t.is(canonicalEmail("jane+x@outlook.com"), "jane@outlook.com");
  t.is(canonicalEmail("jane+x@icloud.com"), "jane@icloud.com");
});

test("canonical form: a local part that is only a tag is kept", (t) => {
  t.is(canonicalEmail("+promo@example.com"), "+promo@example.com");
});

test("validity: a pragmatic check", (t) => {
  t.true(isValidEmail("a@b.co"));
  t.false(isValidEmail("a@b"));
  t.false(isValidEmail("a b@c.de"));
  t.false(isValidEmail("@c.de"));
});
