import type { Json } from "./server.js";

/** A campaign reward in REST's words: a $20 PayPal payout to the referrer; `fields` override. */
export const payout = (fields: Json = {}): Json => ({
  type: "payout",
  party: "referrer",
  method: "paypal",
  currency: "usd",
  payoutAmount: 20,
  ...fields,
});

/** A campaign reward in REST's words: a 15% coupon to the referee; `fields` override. */
export const discount = (fields: Json = {}): Json => ({
  type: "discount",
  party: "referee",
  method: "mobile_coupon",
  currency: "usd",
  discountPercentage: 15,
  ...fields,
});
