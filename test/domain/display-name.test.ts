import test from "ava";
import { anonymousReferrer, maskedName } from "../../src/domain/display-name.js";

test("a public name is a first name and the initial of the last, whatever the name holds", (t) => {
  const cases: [string, string][] = [
    ["Ada Lovelace", "Ada L."],
    ["Grace Brewster Murray Hopper", "Grace H."],
    ["Grace", "Grace"],
    ["  ada   lovelace ", "Ada L."],
    ["mallory.smith@example.com", "Mallory S."],
    ["mallory@example.com", "Mallory"],
    ["john_doe1987", "John D."],
    ["+33 6 12 34 56 78", anonymousReferrer],
    ["", anonymousReferrer],
    ["@handle", anonymousReferrer],
    ["Jean-Luc O'Brien", "Jean-Luc O."],
    ["Zoé Ñúñez", "Zoé Ñ."],
    ["ابن سينا", "ابن س."],
    ["Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "Aaaaaaaaaaaaaaaaaaaaaaaa"],
  ];
  for (const [name, shown] of cases) t.is(maskedName(name), shown, JSON.stringify(name));
});
