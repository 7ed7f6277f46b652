// Identifies a customer over gRPC with @grpc/grpc-js and the generated
// messages, and prints it as JSON. Run from a clone, with the service
// running: PK=pk_... npx tsx examples/grpc-node.ts
import { create, fromBinary, toBinary, toJsonString } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { CustomersService } from "../gen/referral/v1/customers_pb.js";
import { CustomerSchema } from "../gen/referral/v1/resources_pb.js";

const method = CustomersService.method.identifyCustomer;
const client = new grpc.Client(
  process.env.REFERRALS_GRPC_ADDRESS ?? "localhost:8080",
  grpc.credentials.createInsecure(),
);
const metadata = new grpc.Metadata();
metadata.set("authorization", process.env.PK ?? "");

client.makeUnaryRequest(
  `/${CustomersService.typeName}/${method.name}`,
  (message) => Buffer.from(toBinary(method.input, message)),
  (bytes) => fromBinary(method.output, bytes),
  create(method.input, { externalUserId: "u1", name: "Ada" }),
  metadata,
  (error, response) => {
    client.close();
    if (error || !response?.customer) {
      console.error(error?.message ?? "no customer in the response");
      process.exitCode = 1;
      return;
    }
    console.log(toJsonString(CustomerSchema, response.customer));
  },
);
