// Identifies a customer over Connect with @connectrpc/connect-node and
// prints it as JSON. Run from a clone, with the service running:
// PK=pk_... npx tsx examples/connect-node.ts
import { toJsonString } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { CustomersService } from "../gen/referral/v1/customers_pb.js";
import { CustomerSchema } from "../gen/referral/v1/resources_pb.js";

const transport = createConnectTransport({
  baseUrl: process.env.REFERRALS_URL ?? "http://localhost:8080",
  httpVersion: "1.1",
  // The key goes in the Authorization header of every call.
  interceptors: [
    (next) => (request) => {
      request.header.set("Authorization", process.env.PK ?? "");
      return next(request);
    },
  ],
});

const { customer } = await createClient(CustomersService, transport).identifyCustomer({
  externalUserId: "u1",
  name: "Ada",
});
if (!customer) throw new Error("no customer in the response");
console.log(toJsonString(CustomerSchema, customer));
