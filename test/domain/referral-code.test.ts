import test from "ava";
import {
  generateReferralCode,
  referralCodeAlphabet,
  referralCodeLength,
} from "../../src/domain/referral-code.js";

test("the alphabet has no look-alikes (0/O, 1/I/L)", (t) => {
  for (const ambiguous of "0O1IL") t.false(referralCodeAlphabet.includes(ambiguous), ambiguous);
  t.is(new Set(referralCodeAlphabet).size, referralCodeAlphabet.length);
});

test("codes are 8 characters of the alphabet", (t) => {
  for (let i = 0; i < 2000; i++) {
    const code = generateReferralCode();
    t.is(code.length, referralCodeLength);
    t.true(
      [...code].every((char) => referralCodeAlphabet.includes(char)),
      code,
    );
  }
});

test("codes use the whole alphabet and do not repeat in practice", (t) => {
  const codes = Array.from({ length: 5000 }, generateReferralCode);
  t.is(new Set(codes).size, codes.length);
  t.is(new Set(codes.join("")).size, referralCodeAlphabet.length);
});
